"""The steps an operation asks its driver to perform, and what the driver answers.

An operation (see ``_exchange`` and ``_ops``) is a generator: it yields a
``Fetch`` (a JSON request), a ``Stream`` (an SSE request) or a ``Sleep``, and
is sent an ``Answer``, ``Streamed`` or ``Failure``. ``AsyncHttpBackend``
performs the steps; the decisions stay in the generator, testable with no socket.
``fetch_timeouts`` and ``stream_timeouts`` give a step's timeouts in the shape
httpx's transports read them.

The errors of a step that got no answer in time, or none at all: a refused
connection, a connect timeout, a dropped connection, a request slower than its
``timeout`` (``setup_timeout`` while an environment sets up; ``TotalTime``
checks it) and a tool call past its ``call_timeout`` (``CallDeadline``) each get
an error that says what happened and which option to change; a hosted
deployment's also name the variables behind its host and key.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from ors_gym.backends.http._codec import BodyReader
from ors_gym.backends.http._settings import Settings, Where
from ors_gym.backends.http._sse import StreamAssembler
from ors_gym.errors import OrsConnectionError, OrsTimeoutError

__all__ = [
    "MISSING",
    "Answer",
    "CallDeadline",
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
    "TotalTime",
    "call_timeout_error",
    "descriptor_limit_note",
    "fetch_timeouts",
    "stream_timeouts",
    "timeout_error",
    "transport_error",
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


# -- the errors of a step that got no answer ---------------------------------------------


def transport_error(
    settings: Settings, what: str, where: Where, failure: Failure
) -> OrsConnectionError:
    """The error for a request that got no answer (refused, timed out, dropped, or never
    sent because this process is out of file descriptors)."""
    s = settings
    if failure.kind == "no_descriptors":
        return OrsConnectionError(f"{what}: {descriptor_limit_note(failure)}", **where.kw())
    if (s.hosted or s.platform_api) and failure.kind in ("refused", "connect_timeout"):
        error = OrsTimeoutError if failure.kind == "connect_timeout" else OrsConnectionError
        return error(
            f"{what}: cannot reach the OpenReward {s.hosted_note()} "
            f"({failure.error_type}: {failure.detail}); check the network and those "
            "variables",
            **where.kw(),
        )
    if failure.kind == "connect_timeout":
        return OrsTimeoutError(
            f"cannot reach the ORS server at {s.location}: no connection within "
            f"connect_timeout={s.connect_timeout} s; is it running? raise "
            f"{s.how_to_set('connect_timeout')} for a slow network",
            **where.kw(),
        )
    if failure.kind == "refused":
        return OrsConnectionError(
            f"cannot reach the ORS server at {s.location}: {failure.detail}; is it "
            "running? start one with `ors-gym serve`",
            **where.kw(),
        )
    return OrsConnectionError(
        f"{what}: the connection to {s.location} failed "
        f"({failure.error_type}: {failure.detail})",
        **where.kw(),
    )


def descriptor_limit_note(failure: Failure) -> str:
    """What running out of file descriptors means here, with the limit and how to raise it
    (each open connection holds one; the server was not reached at all)."""
    limits = ""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        limits = (f" (its limit, RLIMIT_NOFILE, is {_fds(soft)} soft, {_fds(hard)} hard)")
        raise_it = (f"raise the soft limit, up to the hard one: `ulimit -n {_fds(hard)}` in the "
                    "shell that starts Python, or resource.setrlimit(resource.RLIMIT_NOFILE, "
                    "(n, hard)) before opening the sessions")
    except (ImportError, OSError, ValueError):  # no RLIMIT_NOFILE on this platform
        raise_it = "raise the open-files limit of this process"
    return (
        f"this process has no file descriptor left to open a connection "
        f"({failure.error_type}: {failure.detail}){limits}; the request was not sent and "
        f"the server was not reached. This is a local limit, not a server that is down: "
        f"{raise_it}, or open fewer connections at once (max_connections_per_host, "
        "max_connections)"
    )


def _fds(value: int) -> str:
    import resource

    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def timeout_error(
    settings: Settings, what: str, where: Where, failure: Failure, setup: bool = False
) -> OrsTimeoutError:
    """The error for a request whose answer did not come within ``timeout``
    (``setup_timeout`` for a ``setup`` request)."""
    s = settings
    name, limit = ("setup_timeout", s.setup_timeout) if setup else ("timeout", s.timeout)
    return OrsTimeoutError(
        f"{what}: no answer from {s.location} within {name}={limit} s "
        f"({failure.error_type}); raise {s.how_to_set(name)} if the server is slow",
        **where.kw(),
    )


def call_timeout_error(settings: Settings, what: str, where: Where) -> OrsTimeoutError:
    """The error for a tool call still running when its ``call_timeout`` passed."""
    s = settings
    return OrsTimeoutError(
        f"{what} did not finish within call_timeout={s.call_timeout} s; the tool may "
        f"still be running on the server. Raise {s.how_to_set('call_timeout')} or pass "
        "None to wait as long as the server keeps the stream alive",
        **where.kw(),
    )


class TotalTime:
    """The check a ``BodyReader`` runs after each piece: the request's time is up."""

    __slots__ = ("clock", "deadline", "limit", "name", "settings", "what", "where")

    def __init__(
        self, settings: Settings, clock: Callable[[], float], deadline: float, limit: float,
        what: str, where: Where, setup: bool = False,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.deadline = deadline
        self.limit = settings.setup_timeout if setup else limit
        self.name = "setup_timeout" if setup else "timeout"
        self.what = what
        self.where = where

    def answered(self) -> None:
        """The answer's head arrived: its time starts now (a wait in this process's
        queue for a connection is not the server's slowness)."""
        self.deadline = self.clock() + self.limit

    def __call__(self) -> None:
        if self.clock() >= self.deadline:
            s = self.settings
            raise OrsTimeoutError(
                f"{self.what}: the answer from {s.location} was still arriving after "
                f"{self.name}={self.limit} s; raise {s.how_to_set(self.name)} if the "
                "server is slow",
                **self.where.kw(),
            )


class CallDeadline:
    """A tool call's ``call_timeout``: calling it (as a ``StreamAssembler`` does after
    each piece) raises once it passed."""

    __slots__ = ("clock", "deadline", "settings", "what", "where")

    def __init__(self, settings: Settings, clock: Callable[[], float], deadline: float,
                 what: str, where: Where) -> None:
        self.settings = settings
        self.clock = clock
        self.deadline = deadline
        self.what = what
        self.where = where

    def left(self) -> float:
        """Seconds left (0 once passed)."""
        return max(self.deadline - self.clock(), 0.0)

    def __call__(self) -> None:
        if self.clock() >= self.deadline:
            raise call_timeout_error(self.settings, self.what, self.where)
