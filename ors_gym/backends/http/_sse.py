"""One SSE answer of ``/call`` or ``/score_group``, from raw bytes to its JSON result.

``SSEParser`` splits events out of the bytes as they arrive, by the WHATWG
event-stream rules, sans-IO (httpx-sse's public API reads an
``httpx.Response``, a layer the backend does not go through; the tests check
this parser against it). Beneath the parser the bytes are guarded:
everything the server sends (``: ping`` comments too) counts toward the size
cap after gzip is undone, and the call's deadline is checked after every
piece, so a server that pings forever or sends one endless line is cut off.
``StreamAssembler`` then decides what the events mean: the ``task_id`` to
resume a cut stream with, ``chunk`` and ``end`` data joined into the result,
an ``error`` raised by the tool.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable
from typing import Any

from ors_gym.backends.http._codec import BodyDecoder, too_big
from ors_gym.backends.http._settings import Where
from ors_gym.errors import OrsProtocolError

__all__ = ["HEARTBEAT_S", "SSEParser", "StreamAssembler"]

#: The SDK server sends ``: ping`` every 10 s while a tool runs; this much silence
#: on a tool-call stream means the connection is dead, so the call is resumed.
HEARTBEAT_S = 45.0


class SSEParser:
    """Server-sent events from bytes as they arrive.

    Lines end in CRLF, LF or CR (a CRLF split across pieces is one line end);
    ``field: value`` loses one space after the colon; ``data`` lines join with
    LF; comments (``: ping``) and other fields are skipped; a blank line
    dispatches the event (type ``message`` unless ``event`` named one), if it
    has any. Bytes are UTF-8, undecodable ones replaced, as the standard says.
    """

    __slots__ = ("_after_cr", "_data", "_event", "_partial", "_text")

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""  # the unfinished last line
        self._after_cr = False  # the last piece ended in CR: an LF starting the next is its CRLF
        self._event = ""
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        """The events completed by ``data``, as ``(event, data)`` pairs."""
        text = self._text.decode(data)
        if self._after_cr and text[:1] == "\n":
            text = text[1:]
        self._after_cr = text[-1:] == "\r"
        lines = (self._partial + text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            if not line:
                if self._event or self._data:
                    events.append((self._event or "message", "\n".join(self._data)))
                    self._event, self._data = "", []
                continue
            if line[0] == ":":
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
        return events


class StreamAssembler:
    """Reassembles one SSE answer: feed it the stream's raw bytes with ``feed_bytes``.

    ``deadline`` (if given) raises once the call's time is up; it runs after
    every piece that leaves the answer incomplete, events or not.
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
        self._parser = SSEParser()

    def start(self, content_encoding: str = "") -> None:
        """Begin reading the stream's raw bytes, encoded as ``content_encoding``."""
        self._decoder = BodyDecoder(content_encoding, max_bytes=self.max_bytes, what=self.what,
                                    where=self.where)

    def feed_bytes(self, raw: bytes) -> bool:
        """Take a raw piece of the stream as it arrived; True once the answer is complete.

        Raises OrsProtocolError past the size cap (counted after decoding) or on
        corrupt compression, OrsTimeoutError past the call's deadline.
        """
        if self._decoder is None:
            self.start()
            assert self._decoder is not None
        for event, data in self._parser.feed(self._decoder.feed(raw)):
            if self.feed(event, data):
                return True
        if self._deadline is not None:
            self._deadline()
        return False

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
                raise too_big(self.what, self.max_bytes, self.where)
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
