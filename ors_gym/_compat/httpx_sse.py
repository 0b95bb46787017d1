"""httpx-sse: its incremental line splitter and event decoder, fed bytes directly.

httpx-sse's public API (``EventSource``) parses only an ``httpx.Response``;
reading a tool-call stream through those layers made an HTTP step about 15%
slower than feeding the same decoders (``SSELineDecoder``, ``SSEDecoder`` in
its private ``_decoders`` module, present since 0.4.2 and fast since 0.4.3)
the bytes the HTTP backend has already capped and timed. Outside ``VERIFIED``
a small decoder pair written to the same standard (the WHATWG event-stream
rules) takes their place.
"""

from __future__ import annotations

from typing import Any, Protocol

from ors_gym._compat._versions import note_fallback, version_of, within

__all__ = ["VERIFIED", "EventDecoder", "LineDecoder", "decoders"]

#: httpx-sse releases whose _decoders module was read and found as used here.
VERIFIED = ((0, 4, 3), (0, 5))


class LineDecoder(Protocol):
    def decode(self, text: str) -> list[str]: ...


class EventDecoder(Protocol):
    def decode(self, line: str) -> Any: ...  # an event with .event and .data, or None


def decoders() -> tuple[LineDecoder, EventDecoder]:
    """A fresh (line splitter, event decoder) pair for one stream."""
    if _PRIVATE is not None:
        lines, events = _PRIVATE
        return lines(), events()
    note_fallback(
        "httpx_sse._decoders",
        f"httpx-sse {version_of('httpx-sse')} is outside the verified range {VERIFIED} "
        "or lacks SSELineDecoder/SSEDecoder; events are decoded by ors_gym's own decoder",
    )
    return _Lines(), _Events()


def _private() -> tuple[type, type] | None:
    if not within("httpx-sse", *VERIFIED):
        return None
    try:
        from httpx_sse._decoders import SSEDecoder, SSELineDecoder
    except ImportError:
        return None
    return SSELineDecoder, SSEDecoder


_PRIVATE = _private()


class _Event:
    __slots__ = ("data", "event")

    def __init__(self, event: str, data: str) -> None:
        self.event = event
        self.data = data


class _Lines:
    """Lines end in CRLF, LF or CR; a CR at the end of a piece may start a CRLF."""

    def __init__(self) -> None:
        self._buffer = ""

    def decode(self, text: str) -> list[str]:
        text = self._buffer + text
        held_cr = text.endswith("\r")
        if held_cr:
            text = text[:-1]
        parts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._buffer = parts.pop() + ("\r" if held_cr else "")
        return parts


class _Events:
    """``field: value`` lines into events; a blank line dispatches, ``:`` lines are comments."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def decode(self, line: str) -> _Event | None:
        if not line:
            if not self._event and not self._data:
                return None
            event = _Event(self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None
