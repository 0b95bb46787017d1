"""Lockstep token episodes: every running episode's prompt sampled together, then every
step at once, until none runs.

The form of a trainer that samples one turn of a whole batch at a time (TRL's
``rollout_func``, SkyRL's generator, veRL's agent loop). :func:`run_lockstep` resets
one episode per row, then each turn asks the limits (``_room.Room``, the rule
``run_free`` applies too) what every running episode may sample: those with no room end
(``context_overflow`` when the prompt does not fit, never sampled if it was the first;
``max_tokens`` when the budget is used), the others' prompts go to the sampler together
(:func:`ors_gym.sampling.sample_all`, stopping at the bridge's stop ids) and the batch
steps, until every episode has ended. Every session is given back before it returns; a
sampler's exception raises out of it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ors_gym.sampling import TokenSampler, sample_all
from ors_gym.tokens import stops
from ors_gym.tokens._open import EpisodeRow
from ors_gym.tokens._room import Budget, Room, action_of

if TYPE_CHECKING:
    from ors_gym.tokens.batch import AsyncTokenBatch, Rows
    from ors_gym.tokens.trajectory import Trajectory

__all__ = ["run_lockstep"]

logger = logging.getLogger("ors_gym")


async def run_lockstep(
    batch: AsyncTokenBatch,
    rows: Rows,
    sampler: TokenSampler,
    *,
    max_tokens: int | None = None,
    budget: Budget = "row",
    max_prompt: int | None = None,
    max_prompt_name: str = "max_prompt",
    max_model_len: int | None = None,
    max_model_len_name: str = "max_model_len",
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> list[Trajectory]:
    """Play one episode per row of ``rows`` on ``batch`` with ``sampler``; their trajectories.

    ``max_tokens`` (default: the batch's) is what an episode may sample, counted as
    ``budget`` says: in its current token row (``"row"``, the batch's own rule), over
    all its rows (``"episode"``, so that one whose template keeps starting rows still
    ends) or its sampled ids only (``"sampled"``); one with none left ends with
    ``max_tokens``. ``max_prompt``: a first prompt longer than this ends its episode with
    ``context_overflow``; ``max_model_len``: the model's context, which no turn asks past
    and a prompt that fills ends its episode so. An episode ended unsampled this way is
    said at WARNING, naming the limit (``max_prompt`` as ``max_prompt_name``,
    ``max_model_len`` as ``max_model_len_name``: what the caller's user sets).
    """
    room = Room(batch.max_tokens if max_tokens is None else max_tokens, budget, max_prompt,
                max_model_len)
    stop_ids = sorted(batch.bridge.stops)
    try:
        wanted = [r if isinstance(r, EpisodeRow) else EpisodeRow.from_row(r) for r in rows]
        first, _ = await batch.reset(wanted)
        ids = [list(p) for p in first]
        while True:
            trajectories = batch.trajectories
            left = {k: room.left(trajectories[k], len(ids[k])) for k in batch.running}
            await _end_unfit(batch, room, wanted, ids, left,
                             (max_prompt_name, max_model_len_name))
            live = {k: n for k, n in left.items() if isinstance(n, int)}
            if not live:
                break
            sampled = await sample_all(
                sampler, [ids[k] for k in live], max_tokens=list(live.values()),
                stop_token_ids=stop_ids, temperature=temperature, top_p=top_p, logprobs=True)
            actions: list[Any] = [None] * len(ids)
            for k, got in zip(live, sampled, strict=True):
                actions[k] = action_of(got)
            observations, *_ = await batch.step(actions)
            ids = [list(o) for o in observations]
    finally:
        await batch.end(stops.MAX_TOKENS)  # what still runs has used its budget
    return batch.trajectories


async def _end_unfit(batch: AsyncTokenBatch, room: Room, rows: list[EpisodeRow],
                     ids: list[list[int]], left: dict[int, int | str],
                     names: tuple[str, str]) -> None:
    """End the episodes ``left`` gives a stop reason, each with its reason; those whose
    first prompt did not fit are said at WARNING (they are never trained on)."""
    trajectories = batch.trajectories
    unsampled: dict[str, list[int]] = {}
    for k, n in left.items():
        if n == stops.CONTEXT_OVERFLOW and not trajectories[k].turns:
            unsampled.setdefault(room.limit(len(ids[k]), *names), []).append(k)
    for limit, over in unsampled.items():
        logger.warning(
            "%d of %d episodes' first prompts (%s tokens; %s) are %s: they end with "
            "context_overflow and are not trained on", len(over), len(ids),
            sorted({len(ids[k]) for k in over}),
            ", ".join(sorted({rows[k].env_id for k in over})), limit)
    for reason in (stops.CONTEXT_OVERFLOW, stops.MAX_TOKENS):
        ended = [k for k, n in left.items() if n == reason]
        if ended:
            await batch.end(reason, episodes=ended)
