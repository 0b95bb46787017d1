"""``HttpOptions``: every option of the HTTP backends, declared once.

``EnvSettings`` holds one (so ``gym.make(..., call_timeout=5)`` and
``OrsEnv(call_timeout=5)`` set it by its own name), and both faces take one
(``HttpBackend(url, call_timeout=5)`` or ``options=HttpOptions(...)``). Each
option's name, type, default and meaning live in its field here; the options
reference page is checked against them.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import httpx

__all__ = ["MAX_CONNECTIONS_PER_HOST", "SETUP_TIMEOUT_S", "HttpOptions", "option_names"]

#: Default bound on creating a session and waiting for its prompt (the SDK's creation
#: timeout is 30 minutes; its prompt request has none).
SETUP_TIMEOUT_S = 1800.0
#: Default bound on the connections open to one server: each in-flight request holds one
#: (HTTP/1.1), so more sessions than this stepping at once queue for a connection instead
#: of opening one each, and a process's file descriptors stay well within the usual limits.
MAX_CONNECTIONS_PER_HOST = 1024


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True)
class HttpOptions:
    """How an HTTP backend talks to its server: how patient to be, what to send.

    Frozen; ``replace(**changes)`` gives a checked copy (a pickled one has no
    ``transport``). Every field is an option of ``gym.make``/``OrsEnv``/
    ``OrsVectorEnv`` and of both HTTP faces.
    """

    timeout: float = field(default=30.0, metadata=_doc(
        "Seconds each ordinary request may take (a tool call has `call_timeout`)."))
    connect_timeout: float = field(default=5.0, metadata=_doc(
        "Seconds each connection attempt may take."))
    call_timeout: float | None = field(default=None, metadata=_doc(
        "Seconds one tool call may take end to end; None waits as long as the server "
        "keeps the stream alive with its pings."))
    max_retries: int = field(default=5, metadata=_doc(
        "How many times a request is resent after a dropped connection or a 502, 503 "
        "or 504 answer (a refused connection fails at once; a 429 spends none, see "
        "`rate_limit_timeout`); the first retry is logged at WARNING."))
    backoff: float = field(default=0.5, metadata=_doc(
        "Seconds before the first retry, doubled for each further one (a `Retry-After` "
        "answer header wins)."))
    starting_ride_out: float = field(default=600.0, metadata=_doc(
        "Seconds an environment whose `setup()` is still running is waited for."))
    rate_limit_timeout: float = field(default=600.0, metadata=_doc(
        "Seconds requests keep waiting out `429 Too Many Requests` answers (as long as "
        "their `Retry-After` asks, spending no retries) while no request of this process "
        "to that server and API key gets through."))
    setup_timeout: float = field(default=SETUP_TIMEOUT_S, metadata=_doc(
        "Seconds creating a session and getting its prompt may take (the environment's "
        "constructor, `setup()` and prompt run meanwhile)."))
    keepalive_interval: float | None = field(default=30.0, metadata=_doc(
        "Seconds between pings of the open sessions (also while a slow request runs); "
        "None: no pings."))
    max_response_bytes: int = field(default=64 * 1024 * 1024, metadata=_doc(
        "The largest answer read, after gzip is undone; a larger one raises "
        "`OrsProtocolError`."))
    headers: Mapping[str, str] = field(default_factory=dict, metadata=_doc(
        "Extra request headers, sent to the server only (not across a redirect to "
        "another origin)."))
    max_connections: int | None = field(default=None, metadata=_doc(
        "The most connections open at once (None: no bound); a request over it queues "
        "for one, and its `timeout` starts once it has one (a tool call's `call_timeout` "
        "counts the wait)."))
    max_connections_per_host: int | None = field(default=MAX_CONNECTIONS_PER_HOST, metadata=_doc(
        "The most connections open at once to one server (None: no bound); each "
        "request in flight holds one, and a request over the bound queues for one as "
        "`max_connections` says."))
    max_keepalive_connections: int | None = field(default=100, metadata=_doc(
        "The most idle connections kept for reuse (None: all)."))
    transport: httpx.AsyncBaseTransport | None = field(default=None, metadata=_doc(
        "The `httpx.AsyncBaseTransport` every request is sent through (e.g. "
        "`httpx.AsyncHTTPTransport(proxy=...)`), shared and not closed by the env; None: "
        "ors_gym's own pool, or httpx's client when a proxy variable (`HTTPS_PROXY`, "
        "`HTTP_PROXY`, `ALL_PROXY`, with `NO_PROXY`) is set."))

    def __post_init__(self) -> None:
        for name in ("timeout", "connect_timeout", "setup_timeout"):
            value = getattr(self, name)
            if _not_number(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("call_timeout", "keepalive_interval"):
            value = getattr(self, name)
            if value is not None and (_not_number(value) or value <= 0):
                raise ValueError(f"{name} must be a positive number of seconds or None, "
                                 f"got {value!r}")
        if _not_int(self.max_retries) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        for name in ("backoff", "starting_ride_out", "rate_limit_timeout"):
            value = getattr(self, name)
            if _not_number(value) or value < 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
        if _not_int(self.max_response_bytes) or self.max_response_bytes <= 0:
            raise ValueError(
                f"max_response_bytes must be a positive int, got {self.max_response_bytes!r}")
        for name in ("max_connections", "max_connections_per_host"):
            value = getattr(self, name)
            if value is not None and (_not_int(value) or value < 1):
                raise ValueError(f"{name} must be None (no bound) or an int >= 1, "
                                 f"got {value!r}")
        if self.max_keepalive_connections is not None and (
                _not_int(self.max_keepalive_connections) or self.max_keepalive_connections < 0):
            raise ValueError(f"max_keepalive_connections must be None (keep every idle "
                             f"connection) or an int >= 0, got {self.max_keepalive_connections!r}")
        if self.transport is not None and not isinstance(self.transport,
                                                         httpx.AsyncBaseTransport):
            sync = isinstance(self.transport, httpx.BaseTransport)
            raise TypeError(
                "transport must be an httpx.AsyncBaseTransport such as "
                f"httpx.AsyncHTTPTransport(proxy=...), got {type(self.transport).__name__}"
                + (" (a blocking transport; use its Async twin)" if sync else ""))
        if not isinstance(self.headers, Mapping):
            raise TypeError(f"headers must be a dict of str to str, got "
                            f"{type(self.headers).__name__}")
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in self.headers.items()})

    def __getstate__(self) -> dict[str, Any]:
        # A transport holds this process's connections: pickled (or copied) options have none.
        return {**self.__dict__, "transport": None}

    @classmethod
    def of(cls, base: HttpOptions | None = None, **changes: Any) -> HttpOptions:
        """``base`` (default: the defaults) with ``changes``; an unknown name is a
        ``TypeError`` with a did-you-mean."""
        check_names(changes, "HTTP option")
        base = base if base is not None else cls()
        return replace(base, **changes) if changes else base

    def replace(self, **changes: Any) -> HttpOptions:
        """A copy with ``changes``, checked like a new one."""
        return HttpOptions.of(self, **changes)


def option_names() -> frozenset[str]:
    """The names of the HTTP options."""
    return frozenset(f.name for f in fields(HttpOptions))


def check_names(given: Mapping[str, Any], what: str) -> None:
    """Raise ``TypeError`` naming each unknown option in ``given`` (with a did-you-mean)."""
    known = option_names()
    unknown = sorted(set(given) - known)
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise TypeError(f"unknown {what}(s) {', '.join(hints)}; the HTTP options are: "
                        f"{', '.join(sorted(known))}")


def _not_number(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int | float)


def _not_int(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)
