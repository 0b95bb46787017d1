"""A sampled turn written as the wire's reply: a whole response, or its streaming events.

Both forms are built from the same :class:`Reply` before anything is sent, so a
streamed turn and an unstreamed one record the same trajectory. OpenAI gets
``reasoning_content`` beside ``content`` and ``tool_calls`` with JSON string
arguments, then (streaming) a final chunk with ``usage``; Anthropic gets
``thinking`` (its ``signature`` an opaque handle of the reasoning, the text left out
when the request's ``thinking.display`` is ``omitted``), ``text`` and ``tool_use``
blocks and its event sequence (``message_start`` ... ``message_stop``).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ors_gym.formats import AssistantTurn
from ors_gym.gateway.handles import seal

__all__ = ["Reply", "anthropic_events", "anthropic_message", "openai_chunks", "openai_completion"]


@dataclass(frozen=True)
class Reply:
    """What a reply says: the turn as parsed, why sampling stopped, the token counts."""

    model: str
    turn: AssistantTurn
    finish_reason: str  # the sampler's: "stop" | "length" | "abort"
    prompt_tokens: int
    completion_tokens: int

    @property
    def reasoning(self) -> str:
        return "\n".join(b.text for b in self.turn.reasoning)

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [{"id": c.id, "name": c.name, "arguments": dict(c.arguments)}
                for c in self.turn.tool_calls]


def _openai_finish(reply: Reply) -> str:
    if reply.finish_reason == "length":
        return "length"
    return "tool_calls" if reply.turn.tool_calls else "stop"


def _usage(reply: Reply) -> dict[str, int]:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens}


def openai_completion(reply: Reply) -> dict[str, Any]:
    """A ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.turn.text or None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
            for c in reply.calls
        ]
    return {
        "id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion",
        "created": int(time.time()), "model": reply.model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": _openai_finish(reply)}],
        "usage": _usage(reply),
    }


def openai_chunks(reply: Reply) -> Iterator[str]:
    """The reply as ``chat.completion.chunk`` SSE lines: the message's parts, the finish
    reason, a last chunk with ``usage`` (always: a trainer's harness reads the counts),
    then ``data: [DONE]``."""
    head = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion.chunk",
            "created": int(time.time()), "model": reply.model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}]}
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if reply.reasoning:
        yield chunk({"reasoning_content": reply.reasoning})
    if reply.turn.text:
        yield chunk({"content": reply.turn.text})
    for i, c in enumerate(reply.calls):
        yield chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                     "function": {"name": c["name"], "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": i, "function": {
            "arguments": json.dumps(c["arguments"])}}]})
    yield chunk({}, _openai_finish(reply))
    yield f"data: {json.dumps({**head, 'choices': [], 'usage': _usage(reply)})}\n\n"
    yield "data: [DONE]\n\n"


def _anthropic_stop(reply: Reply) -> str:
    if reply.finish_reason == "length":
        return "max_tokens"
    return "tool_use" if reply.turn.tool_calls else "end_turn"


def _anthropic_blocks(reply: Reply, show_thinking: bool = True) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:  # the signature: an opaque handle of the reasoning, read back
        blocks.append({"type": "thinking", "signature": seal(reply.reasoning),
                       "thinking": reply.reasoning if show_thinking else ""})
    if reply.turn.text:
        blocks.append({"type": "text", "text": reply.turn.text})
    blocks += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
               for c in reply.calls]
    return blocks


def anthropic_message(reply: Reply, show_thinking: bool = True) -> dict[str, Any]:
    """A Messages API ``message`` object (a thinking block's text left out unless
    ``show_thinking``: its signature carries it)."""
    return {
        "id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant",
        "model": reply.model, "content": _anthropic_blocks(reply, show_thinking),
        "stop_reason": _anthropic_stop(reply), "stop_sequence": None,
        "usage": {"input_tokens": reply.prompt_tokens,
                  "output_tokens": reply.completion_tokens},
    }


def anthropic_events(reply: Reply, show_thinking: bool = True) -> Iterator[str]:
    """The reply as Messages streaming events (SSE ``event:``/``data:`` pairs)."""

    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    whole = anthropic_message(reply, show_thinking)
    start = {**whole, "content": [], "stop_reason": None,
             "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": 0}}
    yield event("message_start", {"message": start})
    for i, block in enumerate(whole["content"]):
        kind = block["type"]
        opened: dict[str, Any]
        if kind == "thinking":
            opened, delta = ({"type": "thinking", "thinking": "", "signature": ""},
                             {"type": "thinking_delta", "thinking": block["thinking"]})
        elif kind == "text":
            opened, delta = ({"type": "text", "text": ""},
                             {"type": "text_delta", "text": block["text"]})
        else:
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"]}
            opened["input"] = {}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield event("content_block_start", {"index": i, "content_block": opened})
        yield event("content_block_delta", {"index": i, "delta": delta})
        if kind == "thinking":
            yield event("content_block_delta", {"index": i, "delta": {
                "type": "signature_delta", "signature": block["signature"]}})
        yield event("content_block_stop", {"index": i})
    yield event("message_delta", {"delta": {"stop_reason": whole["stop_reason"],
                                            "stop_sequence": None},
                                  "usage": {"output_tokens": reply.completion_tokens}})
    yield event("message_stop", {})
