"""OpenAI chat, Anthropic or ORS messages (dicts or SDK objects) read back as ORS messages.

The inverse of :mod:`ors_gym.formats.render`: a conversation kept in a model
API's shape (a scorer's input, a saved transcript) becomes ORS
:class:`~ors_gym.protocol.Message` turns, each message's format recognised on
its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ors_gym.formats.shapes import TEXT_TYPES, as_plain, reasoning_text
from ors_gym.protocol import (
    Block,
    ImageBlock,
    Message,
    MessageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    parse,
)

__all__ = ["to_ors_messages"]


def to_ors_messages(messages: Iterable[Any]) -> list[Message]:
    """OpenAI chat, Anthropic or ORS messages (dicts or objects) as ORS Messages.

    Each message's format is recognised on its own: ``blocks`` (ORS), a
    ``tool`` role or ``tool_calls``/``image_url`` (OpenAI), ``tool_use``/
    ``tool_result``/``image`` source blocks (Anthropic). OpenAI ``tool``
    messages become ``tool_result`` blocks of a user turn, and consecutive
    user turns merge, results first (ORS and Anthropic placement). Images given
    by URL rather than base64 data become a text note. Raises ``ValueError``
    naming the message that cannot be read.
    """
    out: list[Message] = []
    for i, raw in enumerate(messages):
        try:
            message = _to_ors(raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"message {i} cannot be read as a conversation turn: {exc}") from None
        if out and message.role == "user" and out[-1].role == "user":
            previous = out.pop()
            both: list[MessageBlock] = [*previous.blocks, *message.blocks]
            merged: list[MessageBlock] = [b for b in both if b.type == "tool_result"]
            merged += [b for b in both if b.type != "tool_result"]
            message = Message(role="user", blocks=merged)
        out.append(message)
    return out


def _to_ors(raw: Any) -> Message:
    if isinstance(raw, Message):
        return raw
    item = as_plain(raw)
    if not isinstance(item, Mapping):
        raise TypeError(f"expected a message dict, got {type(raw).__name__}")
    if "blocks" in item:
        return parse(Message, dict(item), what="ORS message")
    role = item.get("role")
    if role == "tool":
        result = ToolResultBlock(
            tool_call_id=str(item["tool_call_id"]), blocks=_blocks_from(item.get("content"))
        )
        return Message(role="user", blocks=[result])
    if role == "developer":
        role = "system"
    if role not in ("system", "user", "assistant"):
        raise ValueError(f"unknown role {role!r}")
    blocks: list[MessageBlock] = []
    content = item.get("content")
    if isinstance(content, str):
        if content:
            blocks.append(TextBlock(text=content))
    elif isinstance(content, list | tuple):
        for part in map(as_plain, content):
            blocks.extend(_part_to_blocks(part))
    elif content is not None:
        raise TypeError(f"content must be a str or a list, got {type(content).__name__}")
    if role == "assistant":
        for call in item.get("tool_calls") or ():
            call = as_plain(call)
            fn = call.get("function") or {}
            arguments = fn.get("arguments")
            detail = None
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except ValueError:
                    detail, arguments = {"raw_arguments": arguments}, {}
            if not isinstance(arguments, Mapping):
                detail, arguments = {"raw_arguments": arguments}, {}
            blocks.append(
                ToolCallBlock(id=str(call.get("id")), name=str(fn.get("name")),
                              input=dict(arguments), detail=detail)
            )
    return Message(role=role, blocks=blocks)


def _part_to_blocks(part: Any) -> list[MessageBlock]:
    if isinstance(part, str):
        return [TextBlock(text=part)]
    if not isinstance(part, Mapping):
        raise TypeError(f"content part must be a dict, got {type(part).__name__}")
    kind = part.get("type")
    if kind in TEXT_TYPES:
        return [TextBlock(text=str(part.get("text") or ""))]
    if kind in ("image_url", "input_image"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, Mapping) else url
        return [_image_from_url(str(url))]
    if kind == "image":
        source = part.get("source")
        if isinstance(source, Mapping) and source.get("type") == "base64":
            return [ImageBlock(data=str(source["data"]),
                               mimeType=str(source.get("media_type") or "image/png"))]
        if isinstance(source, Mapping) and source.get("url"):
            return [_image_from_url(str(source["url"]))]
        return [parse(ImageBlock, dict(part), what="image block")]
    if kind == "thinking":
        thought = str(part.get("thinking") or "")
        return [ReasoningBlock(text=thought, signature=part.get("signature"))]
    if kind == "reasoning":
        return [ReasoningBlock(text=reasoning_text(part), signature=part.get("signature"))]
    if kind == "redacted_thinking":
        return []
    if kind in ("tool_use", "tool_call"):
        return [ToolCallBlock(id=str(part["id"]), name=str(part["name"]),
                              input=dict(part.get("input") or {}))]
    if kind == "tool_result":
        return [
            ToolResultBlock(
                tool_call_id=str(part.get("tool_use_id") or part.get("tool_call_id")),
                blocks=_blocks_from(part.get("content", part.get("blocks"))),
                is_error=bool(part.get("is_error", False)),
            )
        ]
    raise ValueError(f"unknown content part type {kind!r}")


def _blocks_from(content: Any) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)]
    out: list[Block] = []
    for part in map(as_plain, content):
        for b in _part_to_blocks(part):
            if isinstance(b, TextBlock | ImageBlock):
                out.append(b)
    return out


def _image_from_url(url: str) -> TextBlock | ImageBlock:
    if url.startswith("data:") and "," in url:
        header, _, data = url.partition(",")
        params = header[5:].split(";")
        if "base64" in params[1:]:
            return ImageBlock(data=data, mimeType=params[0] or "image/png")
    return TextBlock(text=f"[image at {url[:200]}]")
