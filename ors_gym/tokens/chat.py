"""ORS messages as the chat messages a tokenizer renders, and a completion's text as an action.

A text model gets string content: an image becomes a note saying it was not
shown, kept inside the tool result it came with (so that no extra user turn
appears, which some templates treat as a new query). A vision model (a
multimodal renderer with its processor) gets the images where its chat
template puts them: a tool result's images inside its tool message, after its
text, as ``{"type": "image", "image": <data URL>}`` parts, one per image, in
order; a message without images keeps string content, as for a text model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ors_gym.protocol import ImageBlock, Message, TextBlock, ToolResultBlock
from ors_gym.tokens._vision import image_part

__all__ = ["chat_messages", "image_note"]

_ROLES = frozenset({"system", "user", "assistant"})


def image_note(count: int) -> str:
    """The text a text model reads in place of ``count`` images."""
    return f"[{count} image(s) not shown: this model reads text only]"


def chat_messages(messages: Iterable[Message], *, multimodal: bool) -> list[dict[str, Any]]:
    """ORS messages as chat dicts: strings for a text model; a vision model's images as
    parts inside the message (a tool result's inside its tool message)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        rest: list[Any] = []
        for block in message.blocks:
            if isinstance(block, ToolResultBlock):
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.tool_call_id,
                        "content": _content(block.blocks, multimodal, empty="(no output)"),
                    }
                )
            elif isinstance(block, TextBlock | ImageBlock):
                rest.append(block)
        if rest or not message.blocks:
            role = message.role if message.role in _ROLES else "user"
            out.append({"role": role, "content": _content(rest, multimodal, empty="")})
    return out


def _content(blocks: Iterable[Any], multimodal: bool, *, empty: str) -> str | list[Any]:
    """Text and images as content: one string (images as a note) unless a vision model
    sees images, then text parts (consecutive texts joined by newlines) and image parts."""
    blocks = [b for b in blocks if isinstance(b, TextBlock | ImageBlock)]
    images = sum(1 for b in blocks if isinstance(b, ImageBlock))
    if not multimodal or not images:
        texts = [b.text for b in blocks if isinstance(b, TextBlock)]
        if images:
            texts.append(image_note(images))
        return "\n".join(texts) if texts else empty
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, ImageBlock):
            parts.append(image_part(b.data, b.mimeType))
        elif parts and parts[-1]["type"] == "text":
            parts[-1]["text"] += "\n" + b.text
        else:
            parts.append({"type": "text", "text": b.text})
    return parts

