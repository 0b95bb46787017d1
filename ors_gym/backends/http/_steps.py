"""The steps an operation asks its driver to perform, and what the driver answers.

An operation (see ``_exchange`` and ``_ops``) is a generator: it yields a
``Fetch`` (a JSON request), a ``Stream`` (an SSE request) or a ``Sleep``, and
is sent an ``Answer``, ``Streamed`` or ``Failure``. ``AsyncHttpBackend``
performs the steps; the decisions stay in the generator, testable with no socket.
``fetch_timeouts`` and ``stream_timeouts`` give a step's timeouts in the shape
httpx's transports read them.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from ors_gym.backends.http._codec import BodyReader
from ors_gym.backends.http._settings import Settings, Where
from ors_gym.backends.http._sse import StreamAssembler

__all__ = [
    "MISSING",
    "Answer",
    "Deadline",
    "Effect",
    "Failure",
    "FailureKind",
    "Fetch",
    "Op",
    "Reply",
    "Sleep",
    "Stream",
    "Streamed",
    "fetch_timeouts",
    "stream_timeouts",
]

_T = TypeVar("_T")


class Deadline(Protocol):
    """A request's total-time check: called after each piece of the answer (raises once
    the time is up); ``answered()`` starts its time when the answer's head arrives."""

    def __call__(self) -> None: ...

    def answered(self) -> None: ...


@dataclass(frozen=True)
class Fetch:
    """Send one request and read its whole answer into ``reader(content_encoding)``.

    ``path`` is under the server's URL, or a whole URL (after a redirect).
    ``timeout`` overrides the settings' ``timeout`` for this request; the
    reader also ends an answer that trickles in for longer than that.
    """

    method: str
    path: str
    headers: dict[str, str]
    content: bytes | None
    timeout: float | None
    what: str
    where: Where
    max_bytes: int = 64 * 1024 * 1024
    check: Deadline | None = None

    def reader(self, content_encoding: str) -> BodyReader:
        return BodyReader(content_encoding, max_bytes=self.max_bytes, what=self.what,
                          where=self.where, check=self.check)


@dataclass(frozen=True)
class Stream:
    """POST ``content``; a 200 answer's raw bytes go to ``sink.read(pieces,
    content_encoding)``, any other answer is read whole into ``reader(content_encoding)``.

    ``read_timeout`` is the longest silence allowed between two bytes;
    ``pool_timeout`` the longest wait for a connection (None: as long as it takes).
    """

    path: str
    headers: dict[str, str]
    content: bytes
    read_timeout: float
    sink: StreamAssembler
    what: str
    where: Where

    pool_timeout: float | None = None

    def reader(self, content_encoding: str) -> BodyReader:
        return BodyReader(content_encoding, max_bytes=self.sink.max_bytes, what=self.what,
                          where=self.where)


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before the next attempt."""

    seconds: float


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: to a ``Fetch``, or a ``Stream`` whose status was not 200."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    elapsed: float = 0.0


@dataclass(frozen=True)
class Streamed:
    """A ``Stream`` answered 200 and was read until it ended or its sink was done."""

    elapsed: float = 0.0


FailureKind = Literal["refused", "connect_timeout", "read_timeout", "timeout", "broken", "stale",
                      "no_descriptors"]


@dataclass(frozen=True)
class Failure:
    """A request that got no HTTP answer.

    ``refused``, ``connect_timeout`` and ``no_descriptors`` (this process out of
    file descriptors) prove the request never left this machine (``not_sent``);
    ``read_timeout`` is silence from a connected server;
    ``timeout`` any other timeout (write, pool); ``broken`` a dropped connection;
    ``stale`` a kept-alive connection the server closed while it sat idle, found
    as the request was written (it ended before a byte of the answer: the server
    never read the request).
    """

    kind: FailureKind
    error_type: str
    detail: str

    @property
    def not_sent(self) -> bool:
        return self.kind in ("refused", "connect_timeout", "no_descriptors")

    @property
    def final(self) -> bool:
        """Sending again now would fail the same way: nothing listens there, or this
        process can open no connection."""
        return self.kind in ("refused", "no_descriptors")


#: What an operation asks its driver to do (the I/O it leaves to the caller).
Effect = Fetch | Stream | Sleep
Reply = Answer | Streamed | Failure | None
#: A backend operation: yields effects, is sent what happened, returns the result.
Op = Generator[Effect, Reply, _T]


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


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: What a request returns for a status listed in its ``fallback``.
MISSING: Any = _Missing()
