"""What an episode may sample next: the one per-turn rule of both token drivers.

Before each turn the lockstep driver (``run_lockstep``) and the free-running one
(``run_free``) ask :meth:`Room.left` of every running episode: how many ids it may
still sample, or the stop reason it ends with instead (``max_tokens`` when its budget
is used, ``context_overflow`` when its prompt leaves the model no room). A sample
becomes its step's action by :func:`action_of`, with the policy version a sampler's
``Sample`` names (its ``policy_version``, None when the sampler does not know it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from ors_gym.sampling import Sample
from ors_gym.tokens import stops
from ors_gym.tokens.trajectory import Trajectory

__all__ = ["Budget", "Room", "action_of"]

#: What ``max_tokens`` counts: the current row's completion ids (sampled and the
#: environment's: the batch's own rule), every row's, or only the ids the model sampled.
Budget = Literal["row", "episode", "sampled"]

#: A turn's budget when nothing caps the episode's tokens.
_UNCAPPED = 2**20


@dataclass(frozen=True)
class Room:
    """An episode's limits. ``max_tokens``: what it may sample, counted as ``budget``
    says (None: uncapped). ``max_prompt``: a first prompt longer than this ends the
    episode unsampled. ``max_model_len``: the model's context; no turn asks past it, and
    a prompt that fills it ends the episode. Both end it with ``context_overflow``."""

    max_tokens: int | None = None
    budget: Budget = "row"
    max_prompt: int | None = None
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        if self.budget not in get_args(Budget):
            raise ValueError(f"budget must be one of {get_args(Budget)}, got {self.budget!r}")
        for name in ("max_tokens", "max_prompt", "max_model_len"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")

    def left(self, trajectory: Trajectory, prompt_len: int) -> int | str:
        """The ids the episode may sample for the prompt of ``prompt_len`` ids (at least
        1), or the stop reason it ends with instead."""
        if self.max_model_len is not None and prompt_len >= self.max_model_len:
            return stops.CONTEXT_OVERFLOW
        if self.max_prompt is not None and prompt_len > self.max_prompt and not trajectory.turns:
            return stops.CONTEXT_OVERFLOW
        left = _UNCAPPED if self.max_tokens is None else self.max_tokens - _used(
            trajectory, self.budget)
        if self.max_model_len is not None:
            left = min(left, self.max_model_len - prompt_len)
        return left if left > 0 else stops.MAX_TOKENS

    def limit(self, prompt_len: int, name: str = "max_prompt",
              model_name: str = "max_model_len") -> str:
        """The limit a prompt of ``prompt_len`` ids overflows, for a message (``name`` and
        ``model_name``: what the caller calls ``max_prompt`` and ``max_model_len``)."""
        if self.max_model_len is not None and prompt_len >= self.max_model_len:
            return f"not shorter than {self.max_model_len} ({model_name})"
        return f"longer than {self.max_prompt} ({name})"


def _used(trajectory: Trajectory, budget: Budget) -> int:
    rows = trajectory.rows
    if budget == "row":
        return len(rows[-1].completion_ids)
    if budget == "episode":
        return sum(len(r.completion_ids) for r in rows)
    return sum(r.mask.count(1) for r in rows)


def action_of(sample: Sample) -> dict[str, Any]:
    """The step action of a sample: its ids, logprobs and policy version (if it names one)."""
    return {"ids": sample.ids, "logprobs": sample.logprobs,
            "policy_version": sample.policy_version}
