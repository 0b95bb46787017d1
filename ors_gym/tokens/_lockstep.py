"""Lockstep token episodes: every running episode's prompt sampled together, then every
step at once, until none runs.

The form of a trainer that samples one turn of a whole batch at a time (TRL's
``rollout_func``, SkyRL's generator, veRL's agent loop). :func:`run_lockstep` resets
one episode per row, ends at once (``context_overflow``, never sampled) those whose
first prompt is over ``max_prompt``, then hands each turn's prompts to the sampler
together (:func:`ors_gym.sampling.sample_all`, stopping at the bridge's stop ids) and
steps the batch, until every episode has ended or used its budget. Every session is
given back before it returns; a sampler's exception raises out of it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from ors_gym.sampling import TokenSampler, sample_all
from ors_gym.tokens import stops
from ors_gym.tokens._open import EpisodeRow
from ors_gym.tokens.trajectory import Trajectory

if TYPE_CHECKING:
    from ors_gym.tokens.batch import AsyncTokenBatch, Rows

__all__ = ["run_lockstep"]

logger = logging.getLogger("ors_gym")

#: A turn's budget when neither the caller nor the batch caps the episode's tokens.
_UNCAPPED = 2**20


async def run_lockstep(
    batch: AsyncTokenBatch,
    rows: Rows,
    sampler: TokenSampler,
    *,
    max_tokens: int | None = None,
    budget: Literal["row", "episode"] = "row",
    max_prompt: int | None = None,
    max_prompt_name: str = "max_prompt",
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> list[Trajectory]:
    """Play one episode per row of ``rows`` on ``batch`` with ``sampler``; their trajectories.

    ``max_tokens`` (default: the batch's) is what an episode may sample: in its current
    token row (``budget="row"``, the batch's own rule) or over all its rows
    (``"episode"``, so that one whose template keeps starting rows still ends); one with
    none left ends with ``max_tokens``. ``max_prompt``: a first prompt longer than this
    ends its episode with ``context_overflow`` (said at WARNING, naming the limit as
    ``max_prompt_name``).
    """
    cap = batch.max_tokens if max_tokens is None else max_tokens
    stop_ids = sorted(batch.bridge.stops)
    try:
        wanted = [r if isinstance(r, EpisodeRow) else EpisodeRow.from_row(r) for r in rows]
        first, _ = await batch.reset(wanted)
        ids = [list(p) for p in first]
        if max_prompt is not None:
            over = [k for k in batch.running if len(ids[k]) > max_prompt]
            if over:
                logger.warning(
                    "%d of %d episodes' first prompts (%s tokens; %s) are longer than %d (%s): "
                    "they end with context_overflow and are not trained on", len(over),
                    len(ids), sorted({len(ids[k]) for k in over}),
                    ", ".join(sorted({wanted[k].env_id for k in over})), max_prompt,
                    max_prompt_name)
                await batch.end(stops.CONTEXT_OVERFLOW, episodes=over)
        while True:
            trajectories = batch.trajectories
            room = {k: _room(trajectories[k], cap, budget) for k in batch.running}
            live = [k for k, left in room.items() if left > 0]
            if not live:
                break
            sampled = await sample_all(
                sampler, [ids[k] for k in live], max_tokens=[room[k] for k in live],
                stop_token_ids=stop_ids, temperature=temperature, top_p=top_p, logprobs=True)
            actions: list[Any] = [None] * len(ids)
            for k, got in zip(live, sampled, strict=True):
                actions[k] = {"ids": got.ids, "logprobs": got.logprobs}
            observations, *_ = await batch.step(actions)
            ids = [list(o) for o in observations]
    finally:
        await batch.end(stops.MAX_TOKENS)  # what still runs has used its budget
    return batch.trajectories


def _room(trajectory: Trajectory, cap: int | None, budget: str) -> int:
    """The ids the episode may still sample."""
    if cap is None:
        return _UNCAPPED
    if budget == "episode":
        return cap - sum(len(r.completion_ids) for r in trajectory.rows)
    return cap - len(trajectory.completion_ids)
