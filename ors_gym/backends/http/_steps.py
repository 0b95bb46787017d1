"""The steps an operation asks its driver to perform, and what the driver answers.

An operation (see ``_exchange`` and ``_ops``) is a generator: it yields a
``Fetch`` (a JSON request), a ``Stream`` (an SSE request) or a ``Sleep``, and
is sent an ``Answer``, ``Streamed`` or ``Failure``. ``AsyncHttpBackend``
performs the steps; the decisions stay in the generator, testable with no socket.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ors_gym.backends.http._codec import BodyReader
from ors_gym.backends.http._settings import Where
from ors_gym.backends.http._sse import StreamAssembler

__all__ = [
    "MISSING",
    "Answer",
    "Effect",
    "Failure",
    "FailureKind",
    "Fetch",
    "Op",
    "Reply",
    "Sleep",
    "Stream",
    "Streamed",
]

_T = TypeVar("_T")


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
    check: Callable[[], None] | None = None

    def reader(self, content_encoding: str) -> BodyReader:
        return BodyReader(content_encoding, max_bytes=self.max_bytes, what=self.what,
                          where=self.where, check=self.check)


@dataclass(frozen=True)
class Stream:
    """POST ``content``; a 200 answer's raw bytes go to ``sink.read(pieces,
    content_encoding)``, any other answer is read whole into ``reader(content_encoding)``.

    ``read_timeout`` is the longest silence allowed between two bytes.
    """

    path: str
    headers: dict[str, str]
    content: bytes
    read_timeout: float
    sink: StreamAssembler
    what: str
    where: Where

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


FailureKind = Literal["refused", "connect_timeout", "read_timeout", "timeout", "broken", "stale"]


@dataclass(frozen=True)
class Failure:
    """A request that got no HTTP answer.

    ``refused`` and ``connect_timeout`` prove the request never left this
    machine (``not_sent``); ``read_timeout`` is silence from a connected server;
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
        return self.kind in ("refused", "connect_timeout")


#: What an operation asks its driver to do (the I/O it leaves to the caller).
Effect = Fetch | Stream | Sleep
Reply = Answer | Streamed | Failure | None
#: A backend operation: yields effects, is sent what happened, returns the result.
Op = Generator[Effect, Reply, _T]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: What a request returns for a status listed in its ``fallback``.
MISSING: Any = _Missing()
