"""Task weights in the core: a reset that draws its task with ``task_weights``.

``check_weights`` makes the env option ``task_weights`` probabilities once, when
the settings are made; ``draw_index`` draws one reset's task index with them.
Where the weights come from (the platform's per-task difficulty) is
``ors_gym.platform``'s business; drawing with them is every env's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["check_weights", "draw_index"]


def check_weights(weights: Any) -> tuple[float, ...]:
    """``weights`` as a tuple of probabilities (normalised here, once, so a reset draws
    with them as they are), or a ValueError saying what is wrong with them."""
    if isinstance(weights, str | bytes) or not isinstance(weights, Sequence | np.ndarray):
        raise TypeError(
            "task_weights must be a list of floats, one per task index of the split "
            f"(see ors_gym.platform.task_weights), got {type(weights).__name__}"
        )
    try:
        values = tuple(float(w) for w in weights)
    except (TypeError, ValueError):
        raise TypeError("task_weights must hold numbers, one per task index") from None
    bad = [w for w in values if not math.isfinite(w) or w < 0]
    if bad or not any(values):
        raise ValueError(
            "task_weights must be finite and non-negative with at least one above zero, got "
            + (f"{bad[0]!r}" if bad else "only zeros")
        )
    total = math.fsum(values)
    return tuple(w / total for w in values)


def _check_count(weights: Sequence[float], count: int, split: str | None) -> None:
    if len(weights) != count:
        raise ValueError(
            f"task_weights has {len(weights)} weights but split {split!r} has {count} tasks; "
            "give one weight per task index (ors_gym.platform.task_weights(rows, num_tasks))"
        )


def draw_index(
    weights: Sequence[float], count: int, rng: np.random.Generator, split: str | None = None
) -> int:
    """A task index of a split of ``count`` tasks, drawn with ``weights`` (probabilities, as
    ``check_weights`` gives them)."""
    _check_count(weights, count, split)
    return int(rng.choice(count, p=weights))
