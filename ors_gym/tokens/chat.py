"""ORS messages as the chat messages a tokenizer renders, and a completion's text as an action.

A text model gets string content: an image becomes a note saying it was not
shown, kept inside the tool result it came with (so that no extra user turn
appears, which some templates treat as a new query). A multimodal renderer gets
OpenAI chat content parts with the images as ``image_url`` data URLs, the shape
:func:`ors_gym.formats.render_messages` writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ors_gym.formats import render_messages
from ors_gym.protocol import ImageBlock, Message, TextBlock, ToolResultBlock

__all__ = ["chat_messages", "image_note"]

_ROLES = frozenset({"system", "user", "assistant"})


def image_note(count: int) -> str:
    """The text a text model reads in place of ``count`` images."""
    return f"[{count} image(s) not shown: this model reads text only]"


def chat_messages(messages: Iterable[Message], *, multimodal: bool) -> list[dict[str, Any]]:
    """ORS messages as chat dicts: strings for a text model, parts for a multimodal one."""
    messages = list(messages)
    if multimodal:
        return render_messages(messages, "openai")
    out: list[dict[str, Any]] = []
    for message in messages:
        rest: list[str] = []
        images = 0
        for block in message.blocks:
            if isinstance(block, ToolResultBlock):
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.tool_call_id,
                        "content": _text(block.blocks),
                    }
                )
            elif isinstance(block, TextBlock):
                rest.append(block.text)
            elif isinstance(block, ImageBlock):
                images += 1
        if images:
            rest.append(image_note(images))
        if rest or not message.blocks:
            role = message.role if message.role in _ROLES else "user"
            out.append({"role": role, "content": "\n".join(rest)})
    return out


def _text(blocks: Iterable[Any]) -> str:
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    images = sum(1 for b in blocks if isinstance(b, ImageBlock))
    if images:
        texts.append(image_note(images))
    return "\n".join(texts) if texts else "(no output)"

