"""Token trajectories as one SkyRL ``GeneratorOutput`` batch.

SkyRL's trainer takes a generator's output as lists, one entry per row:
``prompt_token_ids``, ``response_ids``, ``loss_masks``, ``rewards``,
``rollout_logprobs``, ``stop_reasons`` and ``rollout_metrics``; step-wise
training adds ``is_last_step`` and ``trajectory_ids``, with each trajectory's
rows adjacent. Its stop reasons are the inference engine's: ``"stop"`` (the
model ended its turn) and ``"length"`` (cut by the token budget); its
``zero_reward_on_non_stop`` and overlong filtering zero every other one, so an
episode that the environment ended is ``"stop"`` here, one the environment
failed is ``"abort"``, and ORS's own reason goes to ``env_metrics``. The
environment's named reward parts go to ``env_metrics`` (each trajectory's) and
``rollout_metrics`` (``reward_parts/<name>``, their mean).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ors_gym.tokens import stops

if TYPE_CHECKING:
    from ors_gym.tokens import Trajectory

__all__ = ["generator_output", "skyrl_stop_reason"]

logger = logging.getLogger(__name__)


def skyrl_stop_reason(stop_reason: str | None) -> str:
    """SkyRL's stop reason for a trajectory's (:data:`ors_gym.tokens.stops.SKYRL`):
    ``"length"`` when a token budget cut it, ``"abort"`` when the environment failed
    (SkyRL zeroes its reward), else ``"stop"`` (the model or the env ended it, or its
    turn limit did, after a whole turn)."""
    if stop_reason is None:
        raise ValueError("the trajectory is still running: step it until it ends first")
    if stop_reason not in stops.SKYRL:
        raise ValueError(f"unknown stop reason {stop_reason!r}; known: {stops.STOP_REASONS}")
    return stops.SKYRL[stop_reason]


def _row_rewards(trajectory: Trajectory) -> list[float]:
    """Each token row's share of the episode's step rewards (its own steps)."""
    out, start = [], 0
    for row in trajectory.rows:
        out.append(float(sum(trajectory.rewards[start : start + row.turns])))
        start += row.turns
    out[-1] += float(sum(trajectory.rewards[start:]))
    return out


def generator_output(
    trajectories: Sequence[Trajectory],
    *,
    step_wise: bool = False,
    trajectory_ids: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """One SkyRL ``GeneratorOutput`` for finished ``trajectories``, in order.

    ``step_wise=False``: one row per trajectory, its last token row (an episode
    whose chat template rewrote the history keeps only that, with a warning),
    rewarded with the episode return. ``step_wise=True``: every token row,
    each rewarded with its own steps' rewards (SkyRL takes the advantage from
    the last), with ``is_last_step`` and ``trajectory_ids`` (SkyRL's
    ``TrajectoryID`` objects from its ``GeneratorInput``, or the trajectory's
    position). ``rollout_logprobs`` is None unless every trajectory has the
    sampler's logprobs.
    """
    if not trajectories:
        raise ValueError("generator_output needs at least one trajectory")
    if trajectory_ids is not None and len(trajectory_ids) != len(trajectories):
        raise ValueError(
            f"trajectory_ids has {len(trajectory_ids)} entries for {len(trajectories)} "
            "trajectories: give one per trajectory"
        )
    ids = list(trajectory_ids) if trajectory_ids is not None else [str(i) for i in
                                                                  range(len(trajectories))]
    with_logprobs = all(t.logprobs_given for t in trajectories)
    out: dict[str, Any] = {
        "prompt_token_ids": [], "response_ids": [], "rewards": [], "loss_masks": [],
        "stop_reasons": [], "rollout_logprobs": [] if with_logprobs else None,
        "env_metrics": [],
    }
    is_last: list[bool] = []
    row_ids: list[Any] = []
    for tid, traj in zip(ids, trajectories, strict=True):
        stop = skyrl_stop_reason(traj.stop_reason)
        if step_wise:
            rows = list(range(len(traj.rows)))
            rewards = _row_rewards(traj)
        else:
            if traj.step_wise:
                logger.warning(
                    "a trajectory has %d token rows (its chat template rewrote the history): "
                    "only the last is in the batch; pass step_wise=True to train on every row",
                    len(traj.rows),
                )
            rows, rewards = [len(traj.rows) - 1], [traj.reward]
        for k, reward in zip(rows, rewards, strict=True):
            last = k == len(traj.rows) - 1
            fields = traj.to_skyrl(k)
            out["prompt_token_ids"].append(fields["prompt_token_ids"])
            out["response_ids"].append(fields["response_ids"])
            out["loss_masks"].append(fields["loss_masks"])
            out["rewards"].append(reward)
            out["stop_reasons"].append(stop if last else "stop")
            if with_logprobs:
                out["rollout_logprobs"].append(fields["rollout_logprobs"])
            out["env_metrics"].append({"stop_reason": traj.stop_reason, "turns": traj.turns,
                                       "renderer": traj.renderer,
                                       "policy_versions": fields["policy_versions"],
                                       "reward_parts": fields["reward_parts"]})
            is_last.append(last)
            row_ids.append(tid)
    if step_wise:
        out["is_last_step"] = is_last
        out["trajectory_ids"] = row_ids
    out["rollout_metrics"] = _rollout_metrics(out["response_ids"], out["rewards"],
                                              out["loss_masks"])
    out["rollout_metrics"].update(_parts_metrics(trajectories))
    return out


def _parts_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Each reward part's mean over the trajectories that reported it
    (``reward_parts/<name>``)."""
    values: dict[str, list[float]] = {}
    for traj in trajectories:
        for name, value in traj.reward_parts.items():
            values.setdefault(name, []).append(value)
    return {f"reward_parts/{name}": statistics.fmean(v) for name, v in sorted(values.items())}


def _rollout_metrics(
    responses: list[list[int]], rewards: list[float], masks: list[list[int]]
) -> dict[str, float]:
    """The token figures SkyRL's own generator logs per batch, under its names."""
    lengths = [len(r) for r in responses]
    sampled = [sum(m) for m in masks]
    rewarded = [n for n, r in zip(lengths, rewards, strict=True) if r > 0.0]
    unrewarded = [n for n, r in zip(lengths, rewards, strict=True) if r == 0.0]
    return {
        "generate/min_num_tokens": float(min(lengths)),
        "generate/max_num_tokens": float(max(lengths)),
        "generate/avg_num_tokens": statistics.fmean(lengths),
        "generate/std_num_tokens": statistics.pstdev(lengths),
        "generate/avg_tokens_non_zero_rewards": statistics.fmean(rewarded) if rewarded else 0.0,
        "generate/avg_tokens_zero_rewards": statistics.fmean(unrewarded) if unrewarded else 0.0,
        "generate/avg_assistant_tokens": statistics.fmean(sampled),
        "generate/min_assistant_tokens": float(min(sampled)),
        "generate/max_assistant_tokens": float(max(sampled)),
        "generate/std_assistant_tokens": statistics.pstdev(sampled),
    }
