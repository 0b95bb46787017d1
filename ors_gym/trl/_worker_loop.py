"""The token worker's event loop: free-running episodes, groups scored as they end.

Each group (one row, ``num_generations`` episodes) is an ``AsyncTokenBatch.run_free``
over the worker's shared :class:`~ors_gym.tokens.EnvPool`, with the worker's
``TokenSampler`` and ``run_free``'s own limits (``max_tokens`` counting sampled ids
only, ``max_model_len``): every episode samples its next turn the moment its own tool
returns, whatever the other episodes do, and gives its session back when it ends. A
group is scored when its last episode ends: the ORS returns, plus the environment's
``score_group`` where it has one and it is asked for; advantages are normalised within
the group as TRL's own worker does. Every sampled turn carries the policy version
current when it was asked for (the sampler is wrapped to name it in each ``Sample``;
``run_free`` keeps it in ``Trajectory.policy_versions``); a group whose oldest turn is
more than ``max_staleness`` versions behind at scoring is dropped. The episodes in
flight are bounded by a semaphore, taken a group at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ors_gym.sampling import Sample, TokenSampler
from ors_gym.scoring import ascore_group
from ors_gym.tokens import (
    AsyncTokenBatch,
    EndedEpisode,
    EnvPool,
    EpisodeRow,
    Trajectory,
    stops,
)

__all__ = ["EpisodeResult", "GroupScorer", "LoopSettings", "play_group", "run_groups"]


@dataclass(frozen=True)
class LoopSettings:
    """What every episode samples with, and how groups are made and kept."""

    num_generations: int
    max_tokens: int
    max_model_len: int | None
    temperature: float
    top_p: float
    max_episodes: int
    max_staleness: int | None
    score_group: bool | None
    max_groups: int | None = None
    token_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeResult:
    """One ended episode: its record (each turn's policy version in
    ``policy_versions``), each step's wall time, its own wall time, and whether the
    sampler failed it."""

    trajectory: Trajectory
    tool_s: list[float]
    wall_s: float = 0.0
    sampler_failed: bool = False
    overflowed: bool = False  # the model's context had no room left for a turn


class _Hooks:
    """What the loop reports to its owner (the worker's thread-side state)."""

    def __init__(self, version: Callable[[], int], beat: Callable[[], None],
                 emit: Callable[[list[Any]], Awaitable[None]],
                 metrics: Callable[[dict[str, Any]], None],
                 idle: Callable[[], None] = lambda: None) -> None:
        self.version, self.beat, self.emit, self.metrics = version, beat, emit, metrics
        self.idle = idle


class _Versioned:
    """The worker's sampler, each sample tagged with the policy version current when its
    request went out (weights may change while it is sampled)."""

    def __init__(self, sampler: TokenSampler, version: Callable[[], int]) -> None:
        self.sampler, self.version = sampler, version

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Sample:
        version = self.version()
        got = await self.sampler.sample(prompt_ids, max_tokens=max_tokens,
                                        stop_token_ids=stop_token_ids, temperature=temperature,
                                        top_p=top_p, logprobs=logprobs)
        return dataclasses.replace(got, policy_version=version)

    async def aclose(self) -> None:  # the worker closes its own sampler
        return None


async def play_group(row: EpisodeRow, tokenizer: Any, sampler: TokenSampler, pool: EnvPool,
                     settings: LoopSettings, hooks: _Hooks,
                     ended: Callable[[], None]) -> list[EpisodeResult]:
    """Play the group's episodes free; ``ended()`` is called as each one ends."""
    n = settings.num_generations
    # ``max_tokens`` is the episode's sampled-token budget (``budget="sampled"``); the
    # record's own ``max_tokens`` would charge the environment's ids between turns to it
    batch = AsyncTokenBatch(tokenizer, max_tokens=None, pool=pool, **settings.token_kwargs)
    began = time.monotonic()
    failed: set[int] = set()

    def answered(k: int, answer: Sample | BaseException) -> None:
        if isinstance(answer, BaseException):
            failed.add(k)  # ungraded: the sampler could not sample it
        else:
            hooks.beat()

    results: list[EpisodeResult | None] = [None] * n
    playing = batch.run_free(
        [row] * n, _Versioned(sampler, hooks.version), max_tokens=settings.max_tokens,
        budget="sampled", max_model_len=settings.max_model_len,
        temperature=settings.temperature, top_p=settings.top_p, on_sample=answered)
    # run_free is an async generator: closing it ends the episodes still running
    async with contextlib.aclosing(
            cast("AsyncGenerator[EndedEpisode, None]", playing)) as episodes:
        async for done in episodes:
            k, traj = done.index, done.trajectory
            results[k] = EpisodeResult(traj, list(done.step_s), time.monotonic() - began,
                                       k in failed,
                                       traj.stop_reason == stops.CONTEXT_OVERFLOW)
            ended()
            if not traj.failed:
                hooks.beat()
    return [r for r in results if r is not None]


class GroupScorer:
    """A group's rewards and advantages, and TRL's ``RolloutSample`` of each trained row."""

    def __init__(self, settings: LoopSettings, pool: EnvPool, sample_class: type) -> None:
        self.settings = settings
        self.pool = pool
        self.sample_class = sample_class
        self._unsupported: set[str] = set()  # environments known not to score groups

    async def rewards(self, row: EpisodeRow, results: Sequence[EpisodeResult]
                      ) -> tuple[list[float], list[float] | None]:
        """Each episode's reward (NaN where nothing can be graded) and the group scores."""
        graded = [not (r.sampler_failed or r.overflowed or r.trajectory.failed
                       or r.trajectory.stop_reason == stops.CONTEXT_OVERFLOW) for r in results]
        rewards = [r.trajectory.reward if ok else math.nan for r, ok in zip(results, graded,
                                                                          strict=True)]
        wanted = self.settings.score_group
        key = f"{row.env_id} {sorted(row.env_kwargs.items())!r}"
        if wanted is False or not any(graded) or (wanted is None and key in self._unsupported):
            return rewards, None
        members = [r.trajectory.messages for r, ok in zip(results, graded, strict=True) if ok]
        scorer = self.pool.env(row)  # a session of the task's own to score in
        try:
            await scorer.reset(seed=row.seed, options=row.options)
            if not scorer.tools.supports_score_group:
                if wanted:
                    raise ValueError(f"score_group=True, but {row.env_id} does not score "
                                     "groups (its tools list says supports_score_group=false)")
                self._unsupported.add(key)
                return rewards, None
            scores = iter(await ascore_group(scorer, members))
        finally:
            await scorer.close()
        group = [float(next(scores)) if ok else math.nan for ok in graded]
        return [r + g for r, g in zip(rewards, group, strict=True)], group

    def samples(self, group_id: int, results: Sequence[EpisodeResult], rewards: list[float],
                group: list[float] | None, current: int) -> list[Any]:
        """TRL ``RolloutSample``s: one per trajectory row with a sampled id, the episode's
        advantage on each (TRL's rule: group-normalised, 0 where ungraded)."""
        import numpy as np

        arr = np.asarray(rewards, dtype=float)
        scored = ~np.isnan(arr)
        advantages = np.zeros_like(arr)
        mean = std = math.nan
        if scored.any():
            mean, std = float(arr[scored].mean()), float(arr[scored].std())
            advantages[scored] = (arr[scored] - mean) / (std + 1e-8)
        out = []
        for k, result in enumerate(results):
            if not scored[k]:
                continue
            traj = result.trajectory
            metrics = {"reward": float(arr[k]), "reward_std": std,
                       "rewards/ors_return": float(traj.reward)}
            if group is not None:
                metrics["rewards/ors_group_score"] = float(group[k])
            for name, part in traj.reward_parts.items():  # the environment's named parts
                metrics[f"reward_parts/{name}"] = float(part)
            for row, versions in _row_versions(traj, current):
                if not any(row.mask):
                    continue
                start = len(row.prompt_ids)  # the prompt: mask 0, logprob 0
                mask = np.zeros(len(row.ids), dtype=np.int64)
                mask[start:] = row.mask
                logprobs = np.zeros(len(row.ids), dtype=np.float32)
                logprobs[start:] = row.logprobs
                turn = _first_assistant(traj.messages, row.first_message)
                out.append(self.sample_class(
                    prompt=traj.messages[:turn],
                    completion=traj.messages[turn:],
                    input_ids=np.asarray(row.ids, dtype=np.int64),
                    completion_mask=mask,
                    old_log_probs=logprobs,
                    advantage=float(advantages[k]),
                    model_version=min(versions),
                    group_id=group_id,
                    metrics={**metrics, "rollout/version_span": float(max(versions)
                                                                      - min(versions))},
                ))
        return out


def _first_assistant(messages: list[dict[str, Any]], start: int) -> int:
    """The index of the first assistant message from ``start`` on (a first row's
    ``first_message`` is 0: its prompt messages come before it)."""
    return next((i for i in range(start, len(messages))
                 if messages[i].get("role") == "assistant"), len(messages))


def _row_versions(traj: Trajectory, current: int) -> Iterator[tuple[Any, list[int]]]:
    """Each row with the policy versions of the turns sampled in it."""
    for k, row in enumerate(traj.rows):
        versions = [v for v in traj.row_versions(k) if v is not None]
        yield row, (versions or [current])


def repeat_rows(rows: Sequence[EpisodeRow]) -> Iterator[tuple[int, EpisodeRow]]:
    """(group id, row): the rows in order, again and again."""
    return enumerate(itertools.cycle(rows))


async def run_groups(rows: Sequence[EpisodeRow], tokenizer: Any, sampler: TokenSampler,
                     settings: LoopSettings, hooks: _Hooks, sample_class: type,
                     fatal: Callable[[BaseException], None]) -> None:
    """Start a group whenever its episodes fit under ``max_episodes``, until cancelled (or
    ``max_groups`` played); each group is played, scored and emitted by a task of its own.
    On the way out every episode is cancelled and its session given back, and the pool
    is closed."""
    pool = EnvPool()
    scorer = GroupScorer(settings, pool, sample_class)
    slots = asyncio.Semaphore(settings.max_episodes)
    tasks: set[asyncio.Task[Any]] = set()

    async def group(group_id: int, row: EpisodeRow) -> None:
        began, freed = time.monotonic(), 0

        def ended() -> None:
            nonlocal freed
            freed += 1
            slots.release()

        try:
            results = await play_group(row, tokenizer, sampler, pool, settings, hooks, ended)
            await _score(scorer, group_id, row, results, hooks, settings, began)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug or bad input, not an episode's failure
            fatal(exc)
            raise
        finally:
            for _ in range(settings.num_generations - freed):
                slots.release()

    try:
        for group_id, row in repeat_rows(rows):
            if settings.max_groups is not None and group_id >= settings.max_groups:
                break
            for _ in range(settings.num_generations):
                await slots.acquire()
            task = asyncio.create_task(group(group_id, row))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        while tasks:  # max_groups played: the last groups finish, then the loop idles
            await asyncio.gather(*list(tasks), return_exceptions=True)
        hooks.idle()
        await asyncio.Event().wait()
    finally:
        pending = list(tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.shield(pool.aclose())


async def _score(scorer: GroupScorer, group_id: int, row: EpisodeRow,
                 results: list[EpisodeResult], hooks: _Hooks, settings: LoopSettings,
                 began: float) -> None:
    current = hooks.version()
    versions = [v for r in results for v in r.trajectory.policy_versions if v is not None]
    n = len(results)
    report: dict[str, Any] = {
        f"rollout/stop_{reason}_frac": (float(sum(r.trajectory.stop_reason == reason
                                                  for r in results)), float(n))
        for reason in stops.STOP_REASONS}
    latencies = [t for r in results for t in r.tool_s]
    if latencies:
        report["rollout/tool_latency_s"] = (sum(latencies), float(len(latencies)))
        report["rollout/tool_latency_max_s"] = max(latencies)
    report["rollout/turns_mean"] = (float(sum(r.trajectory.turns for r in results)), float(n))
    # a group's wall time against its slowest episode's own: what waiting for the group cost
    report["rollout/group_s"] = time.monotonic() - began
    report["rollout/episode_s_max"] = max(r.wall_s for r in results)
    report["rollout/sampler_errors_total"] = float(sum(r.sampler_failed for r in results))
    report["rollout/context_full_total"] = float(sum(r.overflowed for r in results))
    stale = (settings.max_staleness is not None and bool(versions)
             and current - min(versions) > settings.max_staleness)
    if stale:
        report["rollout/dropped_stale_groups_total"] = 1.0
        hooks.metrics(report)
        return
    report["rollout/dropped_stale_groups_total"] = 0.0
    if versions:
        report["rollout/staleness_max"] = float(current - min(versions))
    rewards, group = await scorer.rewards(row, results)
    samples = scorer.samples(group_id, results, rewards, group, current)
    report["rollout/groups_scored_total"] = 1.0
    hooks.metrics(report)
    if samples:
        hooks.beat()
        await hooks.emit(samples)
