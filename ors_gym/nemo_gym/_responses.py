"""ORS prompts, tools and tool results in the OpenAI Responses shapes NeMo Gym rows carry.

A NeMo Gym row's ``responses_create_params`` holds the conversation as Responses
``input`` items and the tools as Responses function tools. The task's ORS
messages become ``input`` items here (images as ``input_image`` data URLs), the
session's tools become function tools with the terminal tool left out (ORS hides
it: a plain final answer reaches it), and :func:`prompt_digest` names the
rendered input, so that a row whose prompt no longer matches the live task is
recognised when its session opens. A tool route answers with text only (NeMo
Gym's agents pass a tool's answer on as a string): :func:`tool_text` writes a
note in place of each image.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from ors_gym.formats import render_messages, tools_as
from ors_gym.protocol import Block, ImageBlock, ListToolsOutput, Message, TextBlock

__all__ = ["prompt_digest", "responses_input", "responses_tools", "tool_text"]


def responses_input(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The task's messages as Responses ``input`` items (a multi-turn prompt's tool calls
    and results as ``function_call`` and ``function_call_output`` items)."""
    items: list[dict[str, Any]] = []
    for chat in render_messages(messages, "openai"):
        role = chat["role"]
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": chat["tool_call_id"],
                          "output": chat["content"]})
            continue
        content = chat.get("content")
        if role == "assistant":
            if content:
                items.append({"role": "assistant", "content": content})
            for call in chat.get("tool_calls") or ():
                items.append({"type": "function_call", "call_id": call["id"],
                              "name": call["function"]["name"],
                              "arguments": call["function"]["arguments"]})
            continue
        if isinstance(content, list):
            content = [_input_part(part) for part in content]
        items.append({"role": role, "content": content})
    return items


def _input_part(part: dict[str, Any]) -> dict[str, Any]:
    if part["type"] == "image_url":
        return {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
    return {"type": "input_text", "text": part["text"]}


def responses_tools(tools: ListToolsOutput) -> list[dict[str, Any]]:
    """The session's tools as Responses function tools, the terminal tool left out."""
    return [{**tool, "strict": False} for tool in tools_as(tools, "openai_responses")]


def prompt_digest(items: Sequence[dict[str, Any]]) -> str:
    """The SHA-256 of the rendered ``input`` items (canonical JSON): equal for equal prompts."""
    text = json.dumps(list(items), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tool_text(blocks: Iterable[Block]) -> str:
    """A tool result's text blocks, one a line, with a note where it returned images."""
    lines: list[str] = []
    images = 0
    for block in blocks:
        if isinstance(block, TextBlock):
            lines.append(block.text)
        elif isinstance(block, ImageBlock):
            images += 1
    if images:
        lines.append(f"[{images} image(s) returned by the tool, not shown: NeMo Gym passes "
                     "a tool's answer on as text]")
    return "\n".join(lines)
