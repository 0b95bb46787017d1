"""A model request read off the wire: its conversation, tools and sampling options.

OpenAI Chat Completions and Anthropic Messages bodies both become one
:class:`TurnRequest`. Messages are read by :func:`ors_gym.formats.to_ors_messages`
one at a time (so two user turns stay two) and written as plain chat dicts:
``system``/``user``/``tool`` messages as a text model's template reads them, and
assistant turns as ``{"role": "assistant", "content", "reasoning", "calls"}``, the
form an echoed turn is matched in. Options the gateway cannot honour exactly
(``n > 1``, a forced tool choice, stop strings, non-function tools) are refused.
Images are counted (``TurnRequest.images``) and shown as a text model's note; a
vision model's gateway refuses them (its sampler takes ids only). Messages fields a
coding harness sends that change no sampled id (``thinking``, ``context_management``,
``metadata``, ``cache_control`` on any block) are accepted and ignored; a reasoning
effort (Chat's ``reasoning_effort``, Messages' ``output_config.effort``) is read as
:attr:`TurnRequest.effort`, for a template that reads one; an echoed turn's reasoning
is read back from its thinking ``signature`` (or a
``redacted_thinking`` block's ``data``), the gateway's opaque handle, when its text is
left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ors_gym.formats import to_ors_messages
from ors_gym.formats.shapes import as_plain
from ors_gym.gateway.errors import GatewayError, Wire
from ors_gym.gateway.handles import unseal
from ors_gym.protocol import (
    ImageBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from ors_gym.tokens.chat import chat_messages

__all__ = ["ReadMessages", "TurnRequest", "read_request"]


@dataclass(frozen=True)
class TurnRequest:
    """One model request: ``messages`` (chat dicts, assistant turns in matching form),
    ``tools`` (OpenAI function tools), how to sample, and how many images it holds."""

    wire: Wire
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int | None
    temperature: float
    top_p: float
    stream: bool
    images: int = 0
    show_thinking: bool = True  # Messages' thinking.display "omitted": only the signature
    effort: str | None = None  # the reasoning effort asked, for a template that reads one


class ReadMessages:
    """A session's last request messages as sent and as read: an agent resends its whole
    conversation every turn, so the messages it sent before are not read again (each one
    compared equal to what it sent last time, in order, up to the first that differs)."""

    def __init__(self) -> None:
        self.raw: list[Any] = []
        self.read: list[tuple[list[dict[str, Any]], int]] = []  # (chat dicts, images)

    def __call__(self, raw: list[Any]) -> tuple[list[dict[str, Any]], int]:
        """``raw`` as :func:`read_messages` reads it."""
        known, done = self.raw, self.read
        same = 0
        for old, new in zip(known, raw, strict=False):
            if old is not new and old != new:
                break
            same += 1
        read = done[:same] + [_read_one(item, i) for i, item in enumerate(raw) if i >= same]
        self.raw, self.read = list(raw), read
        return [m for chat, _ in read for m in chat], sum(n for _, n in read)


def read_request(body: Any, wire: Wire, messages_read: ReadMessages | None = None
                 ) -> TurnRequest:
    """``body`` (the request's parsed JSON) as a :class:`TurnRequest`; a
    :class:`GatewayError` (400) naming the field that cannot be served. ``messages_read``:
    the session's reader of its messages, which skips those read at its last request."""
    if not isinstance(body, Mapping):
        raise GatewayError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise GatewayError(400, "'messages' must be a non-empty list of messages",
                           param="messages")
    reader = messages_read or read_messages
    if wire == "openai":
        return _openai(body, messages, reader)
    return _anthropic(body, messages, reader)


def _openai(body: Mapping[str, Any], messages: list[Any], reader: Any) -> TurnRequest:
    n = body.get("n")
    if n not in (None, 1):
        raise GatewayError(400, f"n={n!r}: the gateway samples one choice per request "
                                "(send n requests to the session for n samples)", param="n")
    choice = body.get("tool_choice")
    if choice not in (None, "auto"):
        raise GatewayError(400, f"tool_choice={choice!r} is not supported: the gateway "
                                "samples the model's own turn, so only 'auto' is served",
                           param="tool_choice")
    _no_stop(body.get("stop"), "stop")
    tools = [_openai_tool(t, i) for i, t in enumerate(body.get("tools") or ())]
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    chat, images = reader(messages)
    return TurnRequest(
        wire="openai",
        model=str(body.get("model") or ""),
        messages=chat,
        tools=tools,
        max_tokens=_positive(max_tokens, "max_tokens"),
        temperature=_number(body.get("temperature"), "temperature", 1.0),
        top_p=_number(body.get("top_p"), "top_p", 1.0),
        stream=bool(body.get("stream")),
        images=images,
        effort=_effort(body.get("reasoning_effort"), "reasoning_effort"),
    )


def _anthropic(body: Mapping[str, Any], messages: list[Any], reader: Any) -> TurnRequest:
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, Mapping) else choice
    if kind not in (None, "auto"):
        raise GatewayError(400, f"tool_choice type {kind!r} is not supported: the gateway "
                                "samples the model's own turn, so only 'auto' is served")
    _no_stop(body.get("stop_sequences"), "stop_sequences")
    system = body.get("system")
    head: list[dict[str, Any]] = []
    if isinstance(system, str) and system:
        head = [{"role": "system", "content": system}]
    elif isinstance(system, list) and system:
        texts = [str(as_plain(b).get("text") or "") for b in system]
        head = [{"role": "system", "content": "\n".join(texts)}]
    elif system not in (None, "", []):
        raise GatewayError(400, "'system' must be a string or a list of text blocks")
    tools = [_anthropic_tool(t, i) for i, t in enumerate(body.get("tools") or ())]
    chat, images = reader(messages)
    thinking = body.get("thinking")
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, Mapping) else None
    return TurnRequest(
        wire="anthropic",
        model=str(body.get("model") or ""),
        messages=head + chat,
        tools=tools,
        max_tokens=_positive(body.get("max_tokens"), "max_tokens"),
        temperature=_number(body.get("temperature"), "temperature", 1.0),
        top_p=_number(body.get("top_p"), "top_p", 1.0),
        stream=bool(body.get("stream")),
        images=images,
        show_thinking=not (isinstance(thinking, Mapping)
                           and thinking.get("display") == "omitted"),
        effort=_effort(effort, "output_config.effort"),
    )


def read_messages(raw: list[Any]) -> tuple[list[dict[str, Any]], int]:
    """Wire messages (OpenAI or Anthropic) as chat dicts, assistant turns in matching form,
    and the number of images they hold (each shown as a text model's note)."""
    read = [_read_one(item, i) for i, item in enumerate(raw)]
    return [m for chat, _ in read for m in chat], sum(n for _, n in read)


def _read_one(item: Any, i: int) -> tuple[list[dict[str, Any]], int]:
    """``messages[i]`` as chat dicts, and the images it holds."""
    try:
        (message,) = to_ors_messages([item])
    except ValueError as exc:
        raise GatewayError(400, f"messages[{i}] cannot be read: {exc}",
                           param=f"messages[{i}]") from None
    images = _images(message)
    if message.role != "assistant":
        return chat_messages([message], multimodal=False), images
    plain = as_plain(item)
    reasoning = [b.text for b in message.blocks if isinstance(b, ReasoningBlock)]
    extra = plain.get("reasoning_content") if isinstance(plain, Mapping) else None
    extra = extra or _sealed_reasoning(plain)
    return [{
        "role": "assistant",
        "content": "".join(b.text for b in message.blocks if isinstance(b, TextBlock)),
        "reasoning": "\n".join(reasoning) or (str(extra) if extra else None),
        "calls": [{"id": b.id, "name": b.name, "arguments": dict(b.input)}
                  for b in message.blocks if isinstance(b, ToolCallBlock)],
    }], images


def _sealed_reasoning(plain: Any) -> str | None:
    """The reasoning an echoed Messages turn carries only in its handles: a thinking
    block's ``signature`` (its text omitted) or a ``redacted_thinking`` block's ``data``."""
    blocks = plain.get("content") if isinstance(plain, Mapping) else None
    texts = [unseal(b.get("signature") if b.get("type") == "thinking" else b.get("data"))
             for b in blocks or () if isinstance(b, Mapping)
             and (b.get("type") == "redacted_thinking"
                  or (b.get("type") == "thinking" and not b.get("thinking")))]
    return "\n".join(t for t in texts if t) or None


def _images(message: Message) -> int:
    """The images in ``message``, a tool result's included."""
    blocks = [*message.blocks]
    blocks += [b for r in message.blocks if isinstance(r, ToolResultBlock) for b in r.blocks]
    return sum(1 for b in blocks if isinstance(b, ImageBlock))


def _openai_tool(tool: Any, i: int) -> dict[str, Any]:
    tool = as_plain(tool)
    if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(
        tool.get("function"), Mapping
    ):
        kind = tool.get("type") if isinstance(tool, Mapping) else type(tool).__name__
        raise GatewayError(400, f"tools[{i}] has type {kind!r}: only function tools "
                                "({'type': 'function', 'function': {...}}) are served",
                           param=f"tools[{i}]")
    fn = tool["function"]
    if not fn.get("name"):
        raise GatewayError(400, f"tools[{i}].function has no name", param=f"tools[{i}]")
    return {"type": "function", "function": {
        "name": str(fn["name"]), "description": str(fn.get("description") or ""),
        "parameters": dict(fn.get("parameters") or {"type": "object", "properties": {}})}}


def _anthropic_tool(tool: Any, i: int) -> dict[str, Any]:
    tool = as_plain(tool)
    if not isinstance(tool, Mapping) or tool.get("type") not in (None, "custom") or not (
        tool.get("name")
    ):
        kind = tool.get("type") if isinstance(tool, Mapping) else type(tool).__name__
        raise GatewayError(400, f"tools.{i} has type {kind!r}: only custom tools "
                                "({'name', 'description', 'input_schema'}) are served, whose "
                                "calls the model's template writes; turn the server tool off "
                                "in the client (Claude Code: --disallowedTools WebSearch,"
                                "WebFetch)")
    return {"type": "function", "function": {
        "name": str(tool["name"]), "description": str(tool.get("description") or ""),
        "parameters": dict(tool.get("input_schema") or {"type": "object", "properties": {}})}}


def _no_stop(value: Any, name: str) -> None:
    if value not in (None, "", []):
        raise GatewayError(400, f"{name}={json.dumps(value)} is not supported: a completion "
                                "cut at a stop string would not be the ids the model sampled",
                           param=name)


def _effort(value: Any, name: str) -> str | None:
    """A reasoning effort (``"low"``, ``"high"``, ...): a string, passed as it is."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise GatewayError(400, f"{name}={value!r}: a reasoning effort is a string such as "
                                "'low', 'medium' or 'high'", param=name)
    return value


def _positive(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GatewayError(400, f"{name} must be a positive integer, got {value!r}", param=name)
    return value


def _number(value: Any, name: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise GatewayError(400, f"{name} must be a non-negative number, got {value!r}",
                           param=name)
    return float(value)
