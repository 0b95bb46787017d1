"""Per-task difficulty as the platform reports it, and task sampling weighted by it.

The platform aggregates the rewards of logged rollouts per task
(``TaskDifficulty``); ``task_weights`` turns those rows into one weight per
task index, so episodes go where there is most to learn. The weights are
used where tasks are drawn: ``task_weights=`` of ``OrsEnv``/``AsyncOrsEnv``/
``OrsVectorEnv`` (each reset draws its task with them) and a trainer's
dataset rows (``weighted_indices``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ors_gym._weights import check_weights
from ors_gym.errors import OrsProtocolError

__all__ = [
    "ResponseChars",
    "TaskDifficulty",
    "dataset_indices",
    "task_weights",
    "weighted_indices",
]

#: The least weight a task keeps, as a share of the largest: every task stays reachable.
_FLOOR = 0.05


@dataclass(frozen=True)
class ResponseChars:
    """Percentiles of the characters a model wrote per rollout of the task."""

    mean: float
    p1: float
    p10: float
    p25: float
    p50: float
    p75: float
    p90: float
    p99: float


@dataclass(frozen=True)
class TaskDifficulty:
    """One ``(split, variant, task_index)`` group of logged rollouts: their rewards'
    mean, min and max, how many there were, and the response lengths."""

    task_index: int
    avg_reward: float
    min_reward: float
    max_reward: float
    num_rollouts: int
    response_chars: ResponseChars | None = None
    split: str | None = None
    variant: str | None = None

    @classmethod
    def from_json(cls, row: Mapping[str, Any], *, where: str | None = None) -> TaskDifficulty:
        """A row of the platform's answer; a malformed one is an ``OrsProtocolError``."""
        try:
            chars = row.get("response_chars")
            return cls(
                task_index=int(row["task_index"]),
                avg_reward=float(row["avg_reward"]),
                min_reward=float(row["min_reward"]),
                max_reward=float(row["max_reward"]),
                num_rollouts=int(row["num_rollouts"]),
                response_chars=None if chars is None else ResponseChars(
                    **{k: float(chars[k]) for k in ResponseChars.__dataclass_fields__}),
                split=row.get("split"),
                variant=row.get("variant"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise OrsProtocolError(
                f"malformed task-difficulty row {dict(row)!r}: {type(exc).__name__}: {exc}",
                server=where,
            ) from None


def task_weights(
    difficulty: Sequence[TaskDifficulty], num_tasks: int, *,
    prefer: Literal["uncertain", "hard"] = "uncertain", unseen: float = 1.0,
) -> list[float]:
    """One weight per task index ``0 .. num_tasks - 1`` from the platform's difficulty.

    Average rewards are scaled to ``[0, 1]`` (by their own range when they leave it).
    ``prefer="uncertain"`` weighs a task ``4 r (1 - r)``: most where the model
    succeeds half the time (the richest signal for group-relative methods);
    ``"hard"`` weighs it ``1 - r``. A task with no logged rollout weighs ``unseen``
    (default: as much as the most useful). Every task keeps at least a small share,
    so none is never drawn. Rows of several splits or variants are averaged per index
    by their rollout counts; pass one split's rows to keep them apart.
    """
    if prefer not in ("uncertain", "hard"):
        raise ValueError(f"prefer={prefer!r}; choose 'uncertain' or 'hard'")
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
        raise ValueError(f"num_tasks must be a positive int, got {num_tasks!r}")
    sums: dict[int, list[float]] = {}
    for row in difficulty:
        if 0 <= row.task_index < num_tasks and row.num_rollouts > 0:
            total = sums.setdefault(row.task_index, [0.0, 0.0])
            total[0] += row.avg_reward * row.num_rollouts
            total[1] += row.num_rollouts
    means = {i: s / n for i, (s, n) in sums.items()}
    low, high = min(means.values(), default=0.0), max(means.values(), default=1.0)
    if low >= 0.0 and high <= 1.0:
        low, high = 0.0, 1.0
    span = (high - low) or 1.0
    weights = [float(unseen)] * num_tasks
    for i, mean in means.items():
        r = min(max((mean - low) / span, 0.0), 1.0)
        weights[i] = 4.0 * r * (1.0 - r) if prefer == "uncertain" else 1.0 - r
    floor = _FLOOR * max(max(weights), 1e-12)
    return [max(w, floor) for w in weights]


def weighted_indices(
    weights: Sequence[float], size: int | None = None, *, seed: int | None = 0
) -> list[int]:
    """``size`` task indices drawn with ``weights`` (with replacement; default as many as
    there are weights), for a trainer's dataset rows (e.g. ``OrsSpec(indices=...)``)."""
    values = check_weights(weights)
    count = len(values)
    rng = np.random.default_rng(seed)
    drawn = rng.choice(count, size=count if size is None else size, p=values)
    return [int(i) for i in drawn]


def dataset_indices(count: int, env_kwargs: Mapping[str, Any]) -> list[int]:
    """The task index of each row of a trainer dataset of ``count`` tasks: ``0 ..
    count - 1``, or as many drawn by the env options' ``task_weights`` when given."""
    weights = env_kwargs.get("task_weights")
    if weights is None:
        return list(range(count))
    return weighted_indices(list(weights)[:count] if len(weights) > count else weights, count)
