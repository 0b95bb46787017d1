"""Captured trajectories as JSON (the session API's answer) and as a trainer batch.

:func:`trajectory_json` and :func:`trajectory_from_json` carry a
:class:`~ors_gym.tokens.Trajectory` over HTTP whole (rows, messages, tools,
rewards), so a trainer in another process gets back the object whose exports
(``to_trl``, ``to_verl``, ``to_skyrl``) it uses in-process. :func:`as_batch` lays N
sessions' trajectories out as one trainer batch: every row a sample, each with its
episode's return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.tokens import TokenRow, Trajectory

__all__ = ["as_batch", "trajectory_from_json", "trajectory_json"]

_ROW_FIELDS = ("prompt_ids", "completion_ids", "mask", "logprobs", "turns", "first_message")


def trajectory_json(traj: Trajectory) -> dict[str, Any]:
    """``traj`` as a JSON-ready dict (images are not carried)."""
    return {
        "rows": [{k: getattr(r, k) for k in _ROW_FIELDS} for r in traj.rows],
        "messages": traj.messages,
        "tools": traj.tools,
        "renderer": traj.renderer,
        "rewards": traj.rewards,
        "reward": traj.reward,
        "stop_reason": traj.stop_reason,
        "logprobs_given": traj.logprobs_given,
    }


def trajectory_from_json(data: Mapping[str, Any]) -> Trajectory:
    """The :class:`~ors_gym.tokens.Trajectory` :func:`trajectory_json` wrote."""
    return Trajectory(
        rows=[TokenRow(**{k: row[k] for k in _ROW_FIELDS}) for row in data["rows"]],
        messages=list(data["messages"]),
        tools=list(data["tools"]),
        renderer=str(data.get("renderer", "template")),
        rewards=[float(r) for r in data.get("rewards", ())],
        stop_reason=data.get("stop_reason"),
        logprobs_given=bool(data.get("logprobs_given", True)),
    )


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
