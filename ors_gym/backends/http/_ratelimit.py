"""A rate limit shared by every request of this process to one server and key.

A front door that answers ``429 Too Many Requests`` with ``Retry-After``
limits the API key, not one request: its answer is news for every request of
the process on that key, and ``RateGate`` keeps it. A request that met a 429
waits what the door asked (never less), spending no retries: the budget is
time without progress (``rate_limit_timeout`` seconds in which no request of
the process to that server got an answer other than 429), so environments that
share one limit do not lose their budgets to bad luck while the process as a
whole still gets through. Other requests are not held back: a door's
``Retry-After`` is whole seconds, and a token bucket that refills many times a
second admits them meanwhile.

A stretch of 429 answers is an episode of waiting: when the last request that
met one got through (or gave up), one WARNING tells how many requests waited,
how many 429 answers came and over how long. Gates live per process, keyed by
the server's origin and a digest of the API key; times come from the callers'
monotonic clock. Every method is safe from any thread.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass

__all__ = ["Limited", "RateGate", "gate_for"]

logger = logging.getLogger("ors_gym.http")

_GATES: dict[tuple[str, str], RateGate] = {}
_GATES_LOCK = threading.Lock()


def gate_for(origin: str, api_key: str | None) -> RateGate:
    """The process's gate for ``origin`` (scheme://host:port) and ``api_key``."""
    digest = hashlib.sha256((api_key or "").encode()).hexdigest()[:16]
    return _gate((origin, digest))


def _gate(key: tuple[str, str]) -> RateGate:
    gate = _GATES.get(key)
    if gate is None:
        with _GATES_LOCK:
            gate = _GATES.setdefault(key, RateGate(key[0], key))
    return gate


@dataclass
class Limited:
    """One request's meetings with the rate limit (429 answers so far)."""

    answers: int = 0


class RateGate:
    """What this process knows of one server's rate limit (see the module docstring)."""

    def __init__(self, name: str, key: tuple[str, str] | None = None) -> None:
        self.name = name
        self._key = key
        #: When a request last got an answer other than 429.
        self.progress = 0.0
        self._lock = threading.Lock()
        self._waiting = 0  # requests that met a 429 and have not finished
        self._started = 0.0
        self._requests = 0
        self._answers = 0
        self._longest = 0.0
        self._gave_up = 0

    def through(self, now: float) -> None:
        """A request got an answer other than 429: the process is getting through."""
        self.progress = now

    def limited(self, mine: Limited, now: float, retry_after: float | None,
                backoff: float) -> float:
        """A 429 answer to a request: its wait before the next try, the door's
        ``retry_after`` (``backoff`` when the door names none)."""
        with self._lock:
            if self._waiting == 0 and self._requests == 0:
                self._started = now
            if mine.answers == 0:
                self._waiting += 1
                self._requests += 1
            mine.answers += 1
            self._answers += 1
            if retry_after is None:
                return backoff
            self._longest = max(self._longest, retry_after)
            return retry_after

    def stalled(self, now: float) -> float:
        """Seconds since the process last got through, counted from this episode's start."""
        with self._lock:
            return now - max(self.progress, self._started)

    def done(self, mine: Limited, now: float, gave_up: bool = False) -> None:
        """A request that met a 429 finished (returned, or ``gave_up``: it raised, on the
        rate limit or any other error); the episode's WARNING once it was the last one
        waiting."""
        if mine.answers == 0:
            return
        with self._lock:
            self._waiting -= 1
            self._gave_up += gave_up
            if self._waiting > 0:
                return
            requests, answers, longest, gave = (self._requests, self._answers, self._longest,
                                                self._gave_up)
            took = now - self._started
            self._requests = self._answers = self._gave_up = 0
            self._longest = 0.0
        asked = f" (Retry-After up to {longest:g} s)" if longest else ""
        outcome = (f"{gave} of them then failed" if gave else "every one then got through")
        logger.warning(
            "%s rate-limited this process: %d requests met 429 Too Many Requests "
            "%d times over %.1f s and waited as the server asked%s; %s",
            self.name, requests, answers, took, asked, outcome,
        )

    def __reduce__(self) -> tuple[object, ...]:
        # A process's gate pickles as a reference: unpickled, it is that process's own.
        if self._key is None:
            return (RateGate, (self.name,))
        return (_gate, (self._key,))

    def __repr__(self) -> str:
        return f"RateGate({self.name!r})"
