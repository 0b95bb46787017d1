"""What the driver needs from httpx: timeouts, failures, finished streams.

The operations hand the driver steps; this module turns a step into httpx
timeouts, an httpx exception into the ``Failure`` an operation understands,
and reads what is left of a stream once its result is in. The driver hands
every answer's raw bytes to the sans-IO core, which undoes gzip within the
size cap and parses SSE itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from ors_gym.backends.http._pool import IdleConnectionClosedError
from ors_gym.backends.http._settings import Settings
from ors_gym.backends.http._steps import Failure, FailureKind, Fetch, Stream

__all__ = [
    "BACKGROUND_TIMEOUT_S",
    "DRAIN_LIMIT",
    "SSE_HEADERS",
    "adrain",
    "failure_of",
    "fetch_timeouts",
    "stream_timeouts",
]

#: Timeout of the best-effort requests ``close()`` and the keepalive make.
BACKGROUND_TIMEOUT_S = 5.0
#: What an SSE request adds to its headers (as ``httpx_sse.connect_sse`` does).
SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
#: After a stream's result, at most this much more is read so the connection can be
#: reused; a server that keeps sending loses its connection instead.
DRAIN_LIMIT = 64 * 1024


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
    elif isinstance(exc, IdleConnectionClosedError):
        kind = "stale"
    else:
        kind = "broken"
    return Failure(kind, type(exc).__name__, str(exc))


def fetch_timeouts(step: Fetch, settings: Settings) -> dict[str, float | None]:
    """The timeouts of a ``Fetch`` (as ``httpx.Timeout.as_dict``): its own total, else
    the settings'."""
    total = settings.timeout if step.timeout is None else step.timeout
    return {"connect": min(total, settings.connect_timeout), "read": total, "write": total,
            "pool": total}


def stream_timeouts(step: Stream, settings: Settings) -> dict[str, float | None]:
    """The timeouts of a ``Stream`` (as ``httpx.Timeout.as_dict``): its read timeout
    bounds the silence between pieces."""
    return {"connect": settings.connect_timeout, "read": step.read_timeout,
            "write": settings.timeout, "pool": settings.timeout}


async def adrain(pieces: AsyncIterator[bytes]) -> None:
    """Read a finished stream to its end (within ``DRAIN_LIMIT``), so its connection
    goes back to the pool; past the limit the connection is dropped instead."""
    left = DRAIN_LIMIT
    try:
        async for raw in pieces:
            left -= len(raw)
            if left < 0:
                return
    except httpx.HTTPError:  # the result is in; how the stream ends does not matter
        pass
