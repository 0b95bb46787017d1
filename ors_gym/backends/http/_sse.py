"""One SSE answer of ``/call`` or ``/score_group``, from raw bytes to its JSON result.

httpx-sse parses the events, through its public API: ``EventSource`` over an
``httpx.Response`` made here around the bytes (its line decoder keeps a
partial line as a list of pieces, so a long ``data:`` line costs time linear
in its length). Beneath the parser the bytes are guarded: gzip is undone
within the size cap, everything the server sends (``: ping`` comments too)
counts toward that cap, and the call's deadline is checked after every piece,
so a server that pings forever or sends one endless line is cut off.
``StreamAssembler`` decides what the events mean: the ``task_id`` to resume a
cut stream with, ``chunk`` and ``end`` data joined into the result, an
``error`` raised by the tool. Once the answer is complete, what is left of the
stream is read for at most ``DRAIN_S`` seconds and ``DRAIN_LIMIT`` bytes so its
connection can serve the next request; a server that holds the stream open
longer loses that connection instead of holding up the call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent

from ors_gym.backends.http._codec import BodyDecoder, too_big
from ors_gym.backends.http._settings import Where
from ors_gym.errors import OrsError, OrsProtocolError

__all__ = ["DRAIN_LIMIT", "DRAIN_S", "HEARTBEAT_S", "StreamAssembler"]

#: The SDK server sends ``: ping`` every 10 s while a tool runs; this much silence
#: on a tool-call stream means the connection is dead, so the call is resumed.
HEARTBEAT_S = 45.0
#: After an answer is complete, its stream is read to its end for at most this long
#: (a server closes it at once) so the connection is reused; past it, it is closed.
DRAIN_S = 0.25
#: ... and for at most this many more bytes.
DRAIN_LIMIT = 64 * 1024
#: The headers of the response httpx-sse reads (the bytes it gets are already decoded).
_SSE_HEADERS = [(b"content-type", b"text/event-stream")]


class StreamAssembler:
    """Reassembles one SSE answer: ``await read(pieces, content_encoding)`` with the
    stream's raw bytes, or ``feed`` it events one by one.

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

    async def read(self, pieces: AsyncIterable[bytes], content_encoding: str = "") -> None:
        """Take a 200 answer's raw pieces as they arrive (``content_encoding`` not yet
        undone) until the answer is complete or the stream ends; then drain the rest.

        Raises OrsProtocolError past the size cap (counted after decoding) or on
        corrupt compression, OrsTimeoutError past the call's deadline; the
        transport's own errors (httpx's) pass through. Nothing raised while
        draining reaches the caller: the answer is in by then.
        """
        guarded = _Guarded(self, BodyDecoder(content_encoding, max_bytes=self.max_bytes,
                                             what=self.what, where=self.where), pieces)
        response = httpx.Response(200, headers=_SSE_HEADERS, stream=guarded)
        response.encoding = "utf-8"  # as SSE is; httpx need not look for a charset
        stream = EventSource(response).aiter_sse()
        async for event in stream:
            if self.feed(event.event, event.data):
                break
        else:
            return
        await _drain(stream)

    def feed(self, event: str, data: str) -> bool:
        """Take one event; True once the answer is complete (``end`` or ``error``).

        Events after that are ignored.
        """
        if self.done:
            return True
        if event == "task_id":
            self.task_id = data.strip()
        elif event in ("chunk", "end"):
            self._size += len(data) if data.isascii() else len(data.encode("utf-8"))
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


class _Guarded(httpx.AsyncByteStream):
    """The stream's bytes as httpx-sse reads them: decoded within the size cap, the
    deadline checked after each piece until the answer is complete, then at most
    ``DRAIN_LIMIT`` more bytes. Closing it closes nothing: the caller owns the
    transport's response."""

    def __init__(self, sink: StreamAssembler, decoder: BodyDecoder,
                 pieces: AsyncIterable[bytes]) -> None:
        self._sink = sink
        self._decoder = decoder
        self._pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sink, decoder, deadline = self._sink, self._decoder, self._sink._deadline
        left = DRAIN_LIMIT
        async for raw in self._pieces:
            if sink.done:  # draining: the answer is in, the rest is read to be skipped
                left -= len(raw)
                if left < 0:
                    return
            data = decoder.feed(raw)
            if data:
                yield data  # back here only once the events parsed from it are taken
            if not sink.done and deadline is not None:
                deadline()

    async def aclose(self) -> None:
        pass


async def _drain(stream: AsyncIterator[ServerSentEvent]) -> None:
    """Read the events left after the answer, to the stream's end, within ``DRAIN_S``
    (and the guard's ``DRAIN_LIMIT``), so the connection can be reused. A stream
    still open then is left unread: closing its response closes the connection."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _ in stream:
                pass
    except (TimeoutError, httpx.HTTPError, OrsError):
        pass
