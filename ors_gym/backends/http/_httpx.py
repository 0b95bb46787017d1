"""What both drivers share about httpx: timeouts, failures, and SSE through httpx-sse.

The operations hand the drivers steps; this module turns a step into httpx
timeouts, an httpx exception into a ``Failure``, and a 200 SSE answer into
events. Events are parsed by httpx-sse's ``EventSource`` over a view of the
answer whose bytes come from ``StreamAssembler.decode``: gzip undone, the size
cap and the call's deadline enforced on every piece before the parser sees it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
from httpx_sse import EventSource, ServerSentEvent

from ors_gym.backends.http._settings import Settings
from ors_gym.backends.http._sse import StreamAssembler
from ors_gym.backends.http._steps import Failure, FailureKind, Fetch, Stream

__all__ = [
    "BACKGROUND_TIMEOUT_S",
    "DRAIN_LIMIT",
    "SSE_HEADERS",
    "aiter_sse",
    "failure_of",
    "fetch_timeout",
    "iter_sse",
    "stream_timeout",
]

#: Timeout of the best-effort requests ``close()`` and the keepalive make.
BACKGROUND_TIMEOUT_S = 5.0
#: What an SSE request adds to its headers (as ``httpx_sse.connect_sse`` does).
SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
#: After a stream's result, at most this much more is read so the connection can be
#: reused; a server that keeps sending loses its connection instead.
DRAIN_LIMIT = 64 * 1024
#: The headers of the decoded view the SSE parser reads: SSE is always UTF-8.
_DECODED_SSE = {"content-type": "text/event-stream; charset=utf-8"}


def failure_of(exc: httpx.TransportError) -> Failure:
    """What the operations need to know about an httpx exception."""
    kind: FailureKind
    if isinstance(exc, httpx.ConnectTimeout):
        kind = "connect_timeout"
    elif isinstance(exc, httpx.ReadTimeout):
        kind = "read_timeout"
    elif isinstance(exc, httpx.TimeoutException):
        kind = "timeout"
    elif isinstance(exc, httpx.ConnectError):
        kind = "refused"
    else:
        kind = "broken"
    return Failure(kind, type(exc).__name__, str(exc))


def fetch_timeout(step: Fetch, settings: Settings) -> httpx.Timeout:
    """The httpx timeouts of a ``Fetch``: its own total, else the settings'."""
    total = settings.timeout if step.timeout is None else step.timeout
    return httpx.Timeout(total, connect=min(total, settings.connect_timeout))


def stream_timeout(step: Stream, settings: Settings) -> httpx.Timeout:
    """The httpx timeouts of a ``Stream``: its read timeout bounds the silence between bytes."""
    return httpx.Timeout(settings.timeout, connect=settings.connect_timeout,
                         read=step.read_timeout)


def iter_sse(response: httpx.Response, sink: StreamAssembler) -> Iterator[ServerSentEvent]:
    """The events of a 200 SSE answer, its bytes decoded and guarded by ``sink``.

    Once ``sink`` is done the rest of the stream is read (up to ``DRAIN_LIMIT``)
    without parsing, so the connection can go back to the pool.
    """
    sink.start(response.headers.get("content-encoding", ""))
    view = httpx.Response(200, headers=_DECODED_SSE,
                          stream=_Decoded(response.iter_raw(), sink))
    return EventSource(view).iter_sse()


def aiter_sse(response: httpx.Response, sink: StreamAssembler) -> AsyncIterator[ServerSentEvent]:
    """``iter_sse`` for an answer read on asyncio."""
    sink.start(response.headers.get("content-encoding", ""))
    view = httpx.Response(200, headers=_DECODED_SSE,
                          stream=_AsyncDecoded(response.aiter_raw(), sink))
    return EventSource(view).aiter_sse()


class _Decoded(httpx.SyncByteStream):
    """A stream's raw pieces through ``sink.decode``; drained, not parsed, once it is done."""

    def __init__(self, pieces: Iterator[bytes], sink: StreamAssembler) -> None:
        self._pieces = pieces
        self._sink = sink

    def __iter__(self) -> Iterator[bytes]:
        sink, pieces = self._sink, self._pieces
        for raw in pieces:
            if data := sink.decode(raw):
                yield data
            if sink.done:
                break
        else:
            return
        left = DRAIN_LIMIT
        try:
            for raw in pieces:
                left -= len(raw)
                if left < 0:  # the server keeps sending: its connection is dropped
                    return
        except httpx.HTTPError:  # the result is in; how the stream ends does not matter
            pass


class _AsyncDecoded(httpx.AsyncByteStream):
    """``_Decoded`` for pieces read on asyncio."""

    def __init__(self, pieces: AsyncIterator[bytes], sink: StreamAssembler) -> None:
        self._pieces = pieces
        self._sink = sink

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sink, pieces = self._sink, self._pieces
        async for raw in pieces:
            if data := sink.decode(raw):
                yield data
            if sink.done:
                break
        else:
            return
        left = DRAIN_LIMIT
        try:
            async for raw in pieces:
                left -= len(raw)
                if left < 0:
                    return
        except httpx.HTTPError:
            pass
