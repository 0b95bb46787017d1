"""What the model APIs' shapes have in common, read once for every converter here.

OpenAI chat, OpenAI Responses and Anthropic name text parts differently, their
client libraries hand out pydantic objects rather than dicts, and reasoning
comes as ORS ``text`` or as Responses summary/content parts. The converters
in this package read all of them through these three helpers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ors_gym.actions import ToolCall

__all__ = ["TEXT_TYPES", "as_plain", "reasoning_text"]

#: The ``type`` of a text part in OpenAI chat/Anthropic, Responses output, Responses input.
TEXT_TYPES = frozenset({"text", "output_text", "input_text"})


def as_plain(obj: Any) -> Any:
    """SDK objects (pydantic models of the OpenAI/Anthropic clients, ORS Messages) as dicts."""
    kind = type(obj)
    if kind is dict or kind is str or obj is None:  # the usual cases, without ABC checks
        return obj
    if isinstance(obj, Mapping | str | list | tuple | ToolCall):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except TypeError:
            return dump()
    return obj


def reasoning_text(item: Mapping[str, Any]) -> str:
    """The text of a reasoning item: ORS ``text``, or Responses summary/content parts."""
    if isinstance(item.get("text"), str):
        return str(item["text"])
    parts: list[str] = []
    for key in ("summary", "content"):
        for part in item.get(key) or ():
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    return "\n".join(parts)
