"""One SSE answer of ``/call`` or ``/score_group``, reassembled from its events.

The events themselves are parsed by httpx-sse (see ``_httpx.sse_events``);
this module decides what they mean: the ``task_id`` to resume a cut stream
with, ``chunk`` and ``end`` data joined into the JSON result, an ``error``
raised by the tool. It also guards the bytes beneath the parser: everything
the server sends (``: ping`` comments too) counts toward the size cap after
gzip is undone, and every piece that arrives is checked against the call's
deadline, so a server that pings forever or sends one endless line is cut off.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ors_gym.backends.http._codec import BodyDecoder
from ors_gym.backends.http._settings import Where
from ors_gym.errors import OrsProtocolError

__all__ = ["HEARTBEAT_S", "StreamAssembler"]

#: The SDK server sends ``: ping`` every 10 s while a tool runs; this much silence
#: on a tool-call stream means the connection is dead, so the call is resumed.
HEARTBEAT_S = 45.0


class StreamAssembler:
    """Reassembles one SSE answer: raw bytes through ``decode``, events through ``feed``.

    ``deadline`` (if given) raises once the call's time is up; it runs as each
    new piece of the stream arrives, before the piece is parsed.
    """

    def __init__(
        self,
        *,
        max_bytes: int,
        what: str,
        where: Where,
        deadline: Callable[[], None] | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.what = what
        self.where = where
        self.task_id: str | None = None
        self.error: str | None = None
        self.done = False
        self._parts: list[str] = []
        self._size = 0
        self._deadline = deadline
        self._decoder: BodyDecoder | None = None

    def start(self, content_encoding: str = "") -> None:
        """Begin reading the stream's raw bytes, encoded as ``content_encoding``."""
        self._decoder = BodyDecoder(content_encoding, max_bytes=self.max_bytes, what=self.what,
                                    where=self.where)

    def decode(self, raw: bytes) -> bytes:
        """The stream's bytes for the SSE parser, from a raw piece as it arrived.

        Raises OrsTimeoutError past the call's deadline, OrsProtocolError past
        the size cap (counted after decoding) or on corrupt compression.
        """
        if self._deadline is not None:
            self._deadline()
        if self._decoder is None:
            self.start()
            assert self._decoder is not None
        return self._decoder.feed(raw)

    def feed(self, event: str, data: str) -> bool:
        """Take one event; True once the answer is complete (``end`` or ``error``).

        Events after that are ignored.
        """
        if self.done:
            return True
        if event == "task_id":
            self.task_id = data.strip()
        elif event in ("chunk", "end"):
            self._size += len(data.encode("utf-8"))
            if self._size > self.max_bytes:
                raise OrsProtocolError(
                    f"{self.what}: the answer exceeds max_response_bytes={self.max_bytes}; "
                    "raise HttpBackend(max_response_bytes=...) if results this large are expected",
                    **self.where.kw(),
                )
            self._parts.append(data)
            self.done = event == "end"
        elif event == "error":
            self.error = data or "(no message)"
            self.done = True
        return self.done

    def result(self) -> Any:
        """The parsed JSON of the joined chunks (after ``feed`` returned True without error)."""
        text = "".join(self._parts)
        try:
            return json.loads(text)
        except ValueError as exc:
            raise OrsProtocolError(
                f"{self.what}: the streamed result is not valid JSON ({exc}); "
                f"{len(self._parts)} chunk(s), {len(text)} characters",
                **self.where.kw(),
            ) from None
