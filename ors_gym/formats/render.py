"""ORS messages rendered as OpenAI chat or Anthropic messages, ready to send.

ORS messages follow Anthropic's placement (tool results ride in user turns);
OpenAI chat puts each result in a ``tool`` message, and since it accepts
images only in user messages, a tool's images follow in one user message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal, get_args

from ors_gym.protocol import (
    ImageBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)

__all__ = ["MESSAGE_FORMATS", "MessageFormat", "render_messages"]

MessageFormat = Literal["openai", "anthropic", "ors"]
MESSAGE_FORMATS: tuple[str, ...] = get_args(MessageFormat)


def render_messages(messages: Iterable[Message], fmt: str) -> list[Any]:
    """ORS messages as ``fmt`` messages: ``"openai"`` chat dicts, ``"anthropic"``
    dicts, or ``"ors"`` (the Message objects themselves).

    OpenAI: an assistant message with ``tool_calls`` (arguments as JSON text),
    one ``tool`` message per result, then one user message with the rest
    (images as ``image_url`` data-URL parts, including the tools' images, which
    OpenAI accepts only in user messages). Anthropic: ``tool_use`` and
    ``tool_result`` blocks, images as base64 sources; system messages are left
    out (Anthropic takes the system prompt as a separate parameter).
    """
    if fmt not in MESSAGE_FORMATS:
        raise ValueError(f"unknown message format {fmt!r}; choose one of {list(MESSAGE_FORMATS)}")
    out: list[Any] = []
    for message in messages:
        if fmt == "ors":
            out.append(message)
        elif fmt == "openai":
            out.extend(_openai(message))
        elif message.role != "system":
            out.append(_anthropic(message))
    return out


def _data_url(block: ImageBlock) -> str:
    if block.data.startswith("data:"):
        return block.data
    return f"data:{block.mimeType};base64,{block.data}"


def _texts(blocks: Iterable[Any]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def _openai_parts(blocks: Iterable[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": _data_url(b)}})
    return parts


def _openai(message: Message) -> list[dict[str, Any]]:
    if message.role == "assistant":
        text = "\n".join(
            b.text for b in message.blocks if isinstance(b, TextBlock)
        )
        calls = [
            {
                "id": b.id,
                "type": "function",
                "function": {"name": b.name, "arguments": json.dumps(b.input)},
            }
            for b in message.blocks
            if isinstance(b, ToolCallBlock)
        ]
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            out["tool_calls"] = calls
        elif not text:
            out["content"] = ""
        return [out]
    rendered: list[dict[str, Any]] = []
    rest: list[Any] = []
    for b in message.blocks:
        if isinstance(b, ToolResultBlock):
            images = [i for i in b.blocks if isinstance(i, ImageBlock)]
            text = _texts(b.blocks)
            if not text:
                text = f"[{len(images)} image(s), in the next message]" if images else "(no output)"
            rendered.append({"role": "tool", "tool_call_id": b.tool_call_id, "content": text})
            if images:
                rest.append(TextBlock(text=f"Images returned by tool call {b.tool_call_id}:"))
                rest.extend(images)
        elif isinstance(b, TextBlock | ImageBlock):
            rest.append(b)
    if rest or not rendered:
        if message.role == "system" or all(isinstance(b, TextBlock) for b in rest):
            rendered.append({"role": message.role, "content": _texts(rest)})
        else:
            rendered.append({"role": message.role, "content": _openai_parts(rest)})
    return rendered


def _anthropic_content(blocks: Iterable[Any]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            if b.text:
                content.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            mime, data = b.mimeType, b.data
            if data.startswith("data:"):
                header, _, data = data.partition(",")
                mime = header[5:].split(";")[0] or mime
            content.append(
                {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
            )
        elif isinstance(b, ReasoningBlock):
            if b.signature:  # Anthropic replays only signed thinking
                content.append({"type": "thinking", "thinking": b.text, "signature": b.signature})
        elif isinstance(b, ToolCallBlock):
            content.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        elif isinstance(b, ToolResultBlock):
            inner = _anthropic_content(b.blocks) or [{"type": "text", "text": "(no output)"}]
            content.append(
                {
                    "type": "tool_result",
                    "tool_use_id": b.tool_call_id,
                    "content": inner,
                    "is_error": b.is_error,
                }
            )
    return content


def _anthropic(message: Message) -> dict[str, Any]:
    content = _anthropic_content(message.blocks)
    if not content and message.role == "user":
        content = [{"type": "text", "text": "(no output)"}]
    return {"role": message.role, "content": content}
