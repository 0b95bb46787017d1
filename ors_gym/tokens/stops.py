"""Why a token episode ended: one vocabulary, and each trainer's own names for it.

``Trajectory.stop_reason`` is one of :data:`STOP_REASONS`. Two of them are the
environment failing, not the model: :data:`FAILURES` (``env_error``,
``timeout``) have no grade worth training on, so the bridges let a trainer
mask or count them (TRL's ``rollout_func`` zeroes their ``env_mask``, veRL's
loop their ``response_mask``; SkyRL and Tinker get names their trainers treat
as non-answers). The maps give each trainer's name for every reason:

- :data:`TINKER`: tinker-cookbook's ``StopReason`` values (its ``stop/<reason>``
  metrics); it names no environment failure, so ``env_error`` keeps its own.
- :data:`SKYRL`: SkyRL's inference-engine reasons, ``"stop"`` or ``"length"``
  (its ``zero_reward_on_non_stop`` zeroes every non-``"stop"`` one, so a failure
  is ``"abort"``, the engine's word for a request that did not finish).
- :data:`VERL`: veRL's ``TokenOutput.stop_reason`` values (``"completed"``,
  ``"aborted"``) and its finish reason ``"length"``.
- :data:`TRL`: TRL has no stop reasons; its notion is a *truncated* completion
  (no end-of-sequence, masked under ``mask_truncated_completions``) and a
  *failed* one (a ``None`` reward): ``"stop"``, ``"truncated"`` or ``"failed"``.

:func:`cut_at_stop` cuts sampled ids at the first stop id (a bridge's ``stops``): the
one place a completion's end is found in its ids.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

__all__ = [
    "COMPLETED",
    "CONTEXT_OVERFLOW",
    "ENV_ENDED",
    "ENV_ERROR",
    "FAILURES",
    "MAX_TOKENS",
    "MAX_TURNS",
    "PARSE_ERROR",
    "SKYRL",
    "STOP_REASONS",
    "TIMEOUT",
    "TINKER",
    "TRL",
    "TRUNCATIONS",
    "VERL",
    "cut_at_stop",
    "from_failure",
    "from_step",
]

#: The model's own reply ended the episode (graded by the terminal tool, or a plain reply
#: where the environment ends on one).
COMPLETED = "completed"
#: A tool call (the environment) ended the episode.
ENV_ENDED = "env_ended"
#: The episode's turn limit (``max_steps``) was reached.
MAX_TURNS = "max_turns"
#: The token budget (``max_tokens``) was used up.
MAX_TOKENS = "max_tokens"
#: The prompt alone does not fit the model's context (or the trainer's prompt length).
CONTEXT_OVERFLOW = "context_overflow"
#: The model's completion could not be read as an action, and that ended the episode.
PARSE_ERROR = "parse_error"
#: The environment failed: a lost session, a server error, a broken stream.
ENV_ERROR = "env_error"
#: The environment did not answer in time.
TIMEOUT = "timeout"

STOP_REASONS: tuple[str, ...] = (
    COMPLETED, ENV_ENDED, MAX_TURNS, MAX_TOKENS, CONTEXT_OVERFLOW, PARSE_ERROR, ENV_ERROR,
    TIMEOUT,
)
#: The environment's failures: no grade to train on.
FAILURES: frozenset[str] = frozenset({ENV_ERROR, TIMEOUT})
#: A budget cut the episode short (the model might have gone on).
TRUNCATIONS: frozenset[str] = frozenset({MAX_TURNS, MAX_TOKENS, CONTEXT_OVERFLOW})

TINKER: Mapping[str, str] = {
    COMPLETED: "completed", ENV_ENDED: "tool_stopped", MAX_TURNS: "max_turns",
    MAX_TOKENS: "max_tokens", CONTEXT_OVERFLOW: "context_overflow",
    PARSE_ERROR: "parse_error", ENV_ERROR: "env_error", TIMEOUT: "rollout_timeout",
}
SKYRL: Mapping[str, str] = {
    COMPLETED: "stop", ENV_ENDED: "stop", MAX_TURNS: "stop", MAX_TOKENS: "length",
    CONTEXT_OVERFLOW: "length", PARSE_ERROR: "stop", ENV_ERROR: "abort", TIMEOUT: "abort",
}
VERL: Mapping[str, str] = {
    COMPLETED: "completed", ENV_ENDED: "completed", MAX_TURNS: "completed",
    MAX_TOKENS: "length", CONTEXT_OVERFLOW: "length", PARSE_ERROR: "completed",
    ENV_ERROR: "aborted", TIMEOUT: "aborted",
}
TRL: Mapping[str, str] = {
    COMPLETED: "stop", ENV_ENDED: "stop", MAX_TURNS: "stop", MAX_TOKENS: "truncated",
    CONTEXT_OVERFLOW: "truncated", PARSE_ERROR: "stop", ENV_ERROR: "failed",
    TIMEOUT: "failed",
}

#: ORS ``truncation_reason`` values (``info``) as stop reasons.
_TRUNCATION = {"max_steps": MAX_TURNS, "timeout": TIMEOUT, "session_lost": ENV_ERROR,
               "server_error": ENV_ERROR}


def from_step(
    terminated: bool, truncated: bool, info: Mapping[str, Any], *, plain: bool,
    parse_errors: bool = False,
) -> str | None:
    """The stop reason of an ORS step (None while the episode goes on).

    ``plain``: the model's completion held no tool call it could read (its text went
    to the terminal tool, or to the no-tool-call policy); ``parse_errors``: it held
    calls that could not be read. An episode ended by such a reply is ``completed``,
    or ``parse_error`` when the reply was a failed attempt at a call; one ended by a
    tool call is ``env_ended``; a truncation is named by ``info["truncation_reason"]``.
    """
    if not (terminated or truncated):
        return None
    reason = info.get("truncation_reason")
    if terminated or reason == "no_tool_call":
        if not plain:
            return ENV_ENDED
        return PARSE_ERROR if parse_errors else COMPLETED
    if reason is None:
        return MAX_TURNS  # a step limit that did not say (Gymnasium's TimeLimit)
    return _TRUNCATION.get(str(reason), ENV_ERROR)


def from_failure(exc: BaseException) -> str:
    """The stop reason of an episode a failure ended: ``parse_error`` for an action the
    environment refused, ``timeout``, else ``env_error``."""
    from ors_gym.errors import OrsActionError, OrsTimeoutError

    if isinstance(exc, OrsActionError):
        return PARSE_ERROR
    return TIMEOUT if isinstance(exc, OrsTimeoutError) else ENV_ERROR


def cut_at_stop(ids: Sequence[int], stop_ids: Collection[int], *, keep: bool) -> list[int]:
    """``ids`` up to their first stop id, that id included when ``keep`` (a sampled turn
    as recorded) or not (the text the model wrote); all of them when none stops."""
    for i, token in enumerate(ids):
        if token in stop_ids:
            return list(ids[: i + 1 if keep else i])
    return list(ids)
