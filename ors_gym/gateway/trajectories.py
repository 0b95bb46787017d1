"""Captured trajectories as one trainer batch.

:func:`as_batch` lays N sessions' trajectories out as one trainer batch: every row
a sample, each with its episode's return. (The session API answers with
:meth:`Trajectory.to_dict <ors_gym.tokens.Trajectory.to_dict>`, which
``Trajectory.from_dict`` reads back whole.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ors_gym.tokens import Trajectory

__all__ = ["as_batch"]

def as_batch(trajectories: Sequence[Trajectory], trainer: str = "trl") -> dict[str, list[Any]]:
    """N trajectories as one batch in ``trainer``'s field names (``"trl"``, ``"verl"``,
    ``"skyrl"``): one sample per row (a rewritten history gives several, step-wise), each
    field a list; ``"episode"`` says which trajectory a sample came from and, for TRL,
    ``"reward"`` is its return. Trajectories with no turn are skipped."""
    export = {"trl": "to_trl", "verl": "to_verl", "skyrl": "to_skyrl"}.get(trainer)
    if export is None:
        raise ValueError(f"trainer={trainer!r}; choose 'trl', 'verl' or 'skyrl'")
    batch: dict[str, list[Any]] = {}
    for episode, traj in enumerate(trajectories):
        for row in range(len(traj.rows)):
            sample = getattr(traj, export)(row)
            sample["episode"] = episode
            if trainer == "trl":
                sample["reward"] = traj.reward
            for key, value in sample.items():
                batch.setdefault(key, []).append(value)
    return batch
