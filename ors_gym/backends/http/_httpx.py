"""What the driver needs from httpx: timeouts and failures.

The operations hand the driver steps; this module turns a step into httpx
timeouts and an httpx exception into the ``Failure`` an operation understands.
The driver hands every answer's raw bytes to the core, which undoes gzip
within the size cap (``_sse`` hands a stream's to httpx-sse).
"""

from __future__ import annotations

import errno

import httpx

from ors_gym.backends.http._settings import Settings
from ors_gym.backends.http._steps import Failure, FailureKind, Fetch, Stream
from ors_gym.backends.http.transport._pool import IdleConnectionClosedError

__all__ = [
    "BACKGROUND_TIMEOUT_S",
    "CLOSE_TIMEOUT_S",
    "SSE_HEADERS",
    "failure_of",
    "fetch_timeouts",
    "stream_timeouts",
]

#: Timeout of the best-effort requests ``close()`` and the keepalive make.
BACKGROUND_TIMEOUT_S = 5.0
#: The most ``close()`` spends giving back sessions and ids (each release retries, and
#: waits out a 429, as every request does: this bounds them all).
CLOSE_TIMEOUT_S = 10.0
#: What an SSE request adds to its headers (as ``httpx_sse.connect_sse`` does).
SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}


def failure_of(exc: httpx.TransportError) -> Failure:
    """What the operations need to know about an httpx exception."""
    kind: FailureKind
    if _out_of_descriptors(exc):
        kind = "no_descriptors"
    elif isinstance(exc, httpx.ConnectTimeout):
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


def _out_of_descriptors(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is this process, or the system,
    out of file descriptors (``EMFILE``, ``ENFILE``)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def fetch_timeouts(step: Fetch, settings: Settings) -> dict[str, float | None]:
    """The timeouts of a ``Fetch`` (as ``httpx.Timeout.as_dict``): its own total, else
    the settings'. A request queued for a connection (more in flight than
    ``max_connections_per_host``) waits as long as it takes: the queue is this
    process's own, and every request holding a connection has a bound of its own."""
    total = settings.timeout if step.timeout is None else step.timeout
    return {"connect": min(total, settings.connect_timeout), "read": total, "write": total,
            "pool": None}


def stream_timeouts(step: Stream, settings: Settings) -> dict[str, float | None]:
    """The timeouts of a ``Stream`` (as ``httpx.Timeout.as_dict``): its read timeout
    bounds the silence between pieces. A tool call queued for a connection (more calls
    in flight than ``max_connections_per_host``) waits as long as its ``call_timeout``
    allows: the wait is this process's own queue, not a slow server."""
    return {"connect": settings.connect_timeout, "read": step.read_timeout,
            "write": settings.timeout, "pool": step.pool_timeout}
