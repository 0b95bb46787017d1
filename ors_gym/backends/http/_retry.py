"""When a request is sent again, and after how long.

As in the reference client: 429, 502, 503 and 504 are retried, honouring
``Retry-After``; a 500 is never retried, since the same request gets the same
answer. Three budgets, each named by the error that ends it:

- a failure (502, 504, a plain 503, a dropped connection) spends one of
  ``max_retries``, waiting ``backoff`` doubled per retry or the Retry-After;
- a 503 "starting" (the environment's ``setup()`` still runs) is ridden out
  until ``starting_ride_out`` seconds after the first attempt, spending nothing;
- a 429 is the process's rate limit (``RateGate``, below): waited out as the server
  asks, spending nothing, until no request of the process got through for
  ``rate_limit_timeout`` seconds.

The rate limit: a front door that answers ``429 Too Many Requests`` with ``Retry-After``
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
from collections.abc import Mapping
from dataclasses import dataclass

from ors_gym.backends.http._settings import Settings
from ors_gym.errors import OrsError

__all__ = [
    "MAX_DELAY",
    "RETRY_STATUSES",
    "STARTING_POLL",
    "Limited",
    "RateGate",
    "RetryBudget",
    "RetryHint",
    "add_note",
    "gate_for",
    "parse_retry_after",
    "retry_delay",
    "retry_hint",
]

logger = logging.getLogger("ors_gym.http")

#: Statuses a gateway or a starting server answers; retried (never 500).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Cap on one backoff sleep after a failure, whatever Retry-After says (a 429's is honoured).
MAX_DELAY = 30.0
#: Poll interval for a "starting" 503 without Retry-After (the SDK sends 2).
STARTING_POLL = 2.0
#: How a retryable status's error ends; replaced by the tries and time once they are known.
_RAN_OUT = "; retries ran out"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds (a decimal fraction is taken
    as given); the HTTP-date form is not honoured."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


@dataclass(frozen=True)
class RetryHint:
    """Why a request may be sent again: the server's Retry-After, its "starting" flag,
    and whether it was a 429 (the rate limit)."""

    retry_after: float | None = None
    starting: bool = False
    limited: bool = False


def retry_hint(status: int, headers: Mapping[str, str]) -> RetryHint | None:
    """A hint if ``status`` is retryable (429/502/503/504), else None (never a 500)."""
    if status not in RETRY_STATUSES:
        return None
    return RetryHint(
        retry_after=parse_retry_after(headers.get("retry-after")),
        starting=status == 503 and headers.get("x-backend-state", "").lower() == "starting",
        limited=status == 429,
    )


class RetryBudget:
    """How long one request keeps retrying (see the module docstring).

    ``max_retries`` and ``ride_out`` (seconds a "starting" server is waited for)
    default to the settings'; ``gate`` is the process's rate limit for the server.
    """

    def __init__(
        self, settings: Settings, gate: RateGate, started: float, *,
        max_retries: int | None = None, ride_out: float | None = None,
    ) -> None:
        self.settings = settings
        self.gate = gate
        self.started = started
        self.max_retries = settings.max_retries if max_retries is None else max_retries
        self.ride_out = settings.starting_ride_out if ride_out is None else ride_out
        self.limited = Limited()
        #: Failures that spent ``max_retries``; every failed attempt (``tries``).
        self.attempts = 0
        self.tries = 0
        self._spent = False  # the last delay given spent one of max_retries

    def next_delay(self, hint: RetryHint | None, now: float) -> float | None:
        """Seconds to wait before the next attempt after a failure (not a 429), or None
        to give up."""
        self.tries += 1
        self._spent = False
        retry_after = hint.retry_after if hint is not None else None
        if hint is not None and hint.starting:
            remaining = self.ride_out - (now - self.started)
            if remaining <= 0:
                return None
            delay = STARTING_POLL if retry_after is None else retry_after
            return max(0.0, min(delay, MAX_DELAY, remaining))
        self.attempts += 1
        self._spent = True
        if self.attempts > self.max_retries:
            return None
        delay = self._backoff(self.attempts) if retry_after is None else retry_after
        return max(0.0, min(delay, MAX_DELAY))

    def _backoff(self, n: int) -> float:
        return min(self.settings.backoff * 2 ** (n - 1), MAX_DELAY)

    def rate_limited(self, hint: RetryHint, now: float) -> float:
        """Seconds to wait after a 429 (at least its Retry-After); spends no retry."""
        self.tries += 1
        self._spent = False
        backoff = self._backoff(self.limited.answers + 1)
        return self.gate.limited(self.limited, now, hint.retry_after, backoff)

    def through(self, now: float) -> None:
        """The request got an answer other than 429."""
        self.gate.through(now)

    def finish(self, now: float, gave_up: bool) -> None:
        """The request is over (``gave_up``: it raised); ends this request's part in a
        rate-limit episode."""
        if self.limited.answers:
            self.gate.done(self.limited, now, gave_up)
            self.limited = Limited()

    def first_retry(self) -> bool:
        """Whether the delay just given is this request's first retry after a failure."""
        return self._spent and self.attempts == 1

    def backoff_left(self) -> float:
        """Seconds of backoff the retries still left would wait at most (no Retry-After)."""
        return sum(self._backoff(n) for n in range(self.attempts + 1, self.max_retries + 1))

    def given_up(self, now: float) -> str:
        """What a final error ends with: how many tries over how long, and the option."""
        return (
            f"gave up after {self.tries} tries over {now - self.started:.1f} s "
            f"(max_retries={self.max_retries}; raise it with "
            f"{self.settings.how_to_set('max_retries')})"
        )


def add_note(failure: OrsError, note: str) -> None:
    """Add ``note`` to ``failure``'s message, before the "retries ran out" ending if any."""
    said = failure.message.removesuffix(_RAN_OUT)
    failure.message = f"{said}; {note}" + failure.message[len(said):]
    failure.args = (failure.message,)


def _end(failure: OrsError, said: str, ending: str) -> OrsError:
    failure.message = f"{said}; {ending}"
    failure.args = (failure.message,)
    return failure


def retry_delay(
    budget: RetryBudget, hint: RetryHint | None, failure: OrsError, what: str, now: float
) -> float:
    """Seconds before resending after ``failure``; raises it, saying which budget ran out
    and the option that sets it, once one is spent. The first retry after a failure is
    logged at WARNING (a server that stops answering shows before the retries run out);
    a 429 is logged once per episode by the rate gate."""
    said = failure.message.removesuffix(_RAN_OUT)
    if hint is not None and hint.limited:
        wait = budget.rate_limited(hint, now)
        s = budget.settings
        stalled = budget.gate.stalled(now)
        if stalled >= s.rate_limit_timeout or wait > s.rate_limit_timeout:
            answers = budget.limited.answers
            budget.finish(now, gave_up=True)
            asked = ("" if hint.retry_after is None else
                     f"; the server asks to wait {hint.retry_after:g} s more")
            raise _end(failure, said, (
                f"no request of this process to {budget.gate.name} got through for "
                f"{stalled:.1f} s (this one met 429 {answers} times){asked}: "
                f"gave up after rate_limit_timeout={s.rate_limit_timeout:g} s without "
                f"progress; raise it with {s.how_to_set('rate_limit_timeout')}"
            ))
        return wait
    delay = budget.next_delay(hint, now)
    if delay is None:
        if budget.tries > 1:
            ran_out = _RAN_OUT + ":" if failure.message.endswith(_RAN_OUT) else ";"
            failure.message = f"{said}{ran_out} {budget.given_up(now)}"
            failure.args = (failure.message,)
        raise failure
    if budget.first_retry():
        logger.warning(
            "%s; retrying the %s in %.1f s, up to %d more times over about %.1f s "
            "(max_retries=%d) %s",
            said, what, delay, budget.max_retries, delay + budget.backoff_left(),
            budget.max_retries, str(failure).removeprefix(failure.message).strip(),
        )
    return delay


# -- the process's rate limit per server and key ----------------------------------------

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
