"""When a request is sent again, and after how long.

As in the reference client: 429, 502, 503 and 504 are retried with
exponential backoff, honouring ``Retry-After``; a 503 "starting" (the
environment's ``setup()`` still runs) is ridden out without spending
retries; a 500 is never retried, since the same request gets the same answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from ors_gym.errors import OrsError

__all__ = [
    "MAX_DELAY",
    "RETRY_STATUSES",
    "STARTING_POLL",
    "RetryBudget",
    "RetryHint",
    "add_note",
    "parse_retry_after",
    "retry_delay",
    "retry_hint",
]

logger = logging.getLogger("ors_gym.http")

#: Statuses a gateway or a starting server answers; retried with backoff (never 500).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Cap on one backoff sleep, whatever Retry-After says.
MAX_DELAY = 30.0
#: Poll interval for a "starting" 503 without Retry-After (the SDK sends 2).
STARTING_POLL = 2.0
#: How a retryable status's error ends; replaced by the tries and time once they are known.
_RAN_OUT = "; retries ran out"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header; only the delta-seconds form is honoured."""
    if value is None:
        return None
    value = value.strip()
    return float(value) if value.isdigit() else None


@dataclass(frozen=True)
class RetryHint:
    """Why a request may be sent again: the server's Retry-After and "starting" flag."""

    retry_after: float | None = None
    starting: bool = False


def retry_hint(status: int, headers: Mapping[str, str]) -> RetryHint | None:
    """A hint if ``status`` is retryable (429/502/503/504), else None (never a 500)."""
    if status not in RETRY_STATUSES:
        return None
    return RetryHint(
        retry_after=parse_retry_after(headers.get("retry-after")),
        starting=status == 503 and headers.get("x-backend-state", "").lower() == "starting",
    )


@dataclass
class RetryBudget:
    """How long to keep retrying one request, as in the reference client.

    Each failure spends one of ``max_retries`` (waiting ``backoff`` doubled per
    retry, or the server's Retry-After), except a 503 "starting" answer (the
    environment's ``setup()`` is still running): those are ridden out until
    ``starting_ride_out`` seconds after the first attempt, spending nothing.
    """

    max_retries: int
    backoff: float
    starting_ride_out: float
    started: float
    #: How the user sets ``max_retries``, for the final error (``HttpBackend(max_retries=...)``).
    how_to_set: str = "max_retries=..."
    attempts: int = 0
    #: Failed attempts so far, "starting" answers included.
    tries: int = 0

    def next_delay(self, hint: RetryHint | None, now: float) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        self.tries += 1
        retry_after = hint.retry_after if hint is not None else None
        if hint is not None and hint.starting:
            remaining = self.starting_ride_out - (now - self.started)
            if remaining <= 0:
                return None
            delay = STARTING_POLL if retry_after is None else retry_after
            return max(0.0, min(delay, MAX_DELAY, remaining))
        self.attempts += 1
        if self.attempts > self.max_retries:
            return None
        delay = self.backoff * 2 ** (self.attempts - 1) if retry_after is None else retry_after
        return max(0.0, min(delay, MAX_DELAY))

    def first_retry(self) -> bool:
        """Whether the delay just given is this request's first retry (not a "starting" wait)."""
        return self.attempts == 1 and self.tries == 1

    def backoff_left(self) -> float:
        """Seconds of backoff the retries still left would wait at most (no Retry-After)."""
        return sum(
            min(self.backoff * 2 ** (n - 1), MAX_DELAY)
            for n in range(self.attempts + 1, self.max_retries + 1)
        )

    def given_up(self, now: float) -> str:
        """What a final error ends with: how many tries over how long, and the option."""
        return (
            f"gave up after {self.tries} tries over {now - self.started:.1f} s "
            f"(max_retries={self.max_retries}; raise it with {self.how_to_set})"
        )


def add_note(failure: OrsError, note: str) -> None:
    """Add ``note`` to ``failure``'s message, before the "retries ran out" ending if any."""
    said = failure.message.removesuffix(_RAN_OUT)
    failure.message = f"{said}; {note}" + failure.message[len(said):]
    failure.args = (failure.message,)


def retry_delay(
    budget: RetryBudget, hint: RetryHint | None, failure: OrsError, what: str, now: float
) -> float:
    """Seconds before resending after ``failure``; raises it, saying how many tries over
    how long, once the budget is spent. The first retry is logged at WARNING: a server
    that stops answering shows before the retries run out."""
    delay = budget.next_delay(hint, now)
    said = failure.message.removesuffix(_RAN_OUT)
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
