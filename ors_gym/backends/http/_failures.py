"""The errors for requests that got no answer in time, or none at all.

A refused connection, a connect timeout, a dropped connection, a request
slower than its ``timeout`` (``setup_timeout`` while an environment sets up)
and a tool call past its ``call_timeout`` each get an error that says what
happened and which option to change; a hosted deployment's also name the
variables behind its host and key.
"""

from __future__ import annotations

from collections.abc import Callable

from ors_gym.backends.http._settings import Settings, Where
from ors_gym.backends.http._steps import Failure
from ors_gym.errors import OrsConnectionError, OrsTimeoutError

__all__ = [
    "CallDeadline", "TotalTime", "call_timeout_error", "descriptor_limit_note", "timeout_error",
    "transport_error",
]


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
