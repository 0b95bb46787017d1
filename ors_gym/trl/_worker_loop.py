"""The token worker's event loop: free-running episodes, groups scored as they end.

Each episode is its own task over the worker's shared :class:`~ors_gym.tokens.Backends`
(an ``AsyncTokenBatch`` of one row): it samples its next turn the moment its own
tool returns, whatever the other episodes do, and gives its session back when it
ends. A group (one row, ``num_generations`` episodes) is scored when its last
episode ends: the ORS returns, plus the environment's ``score_group`` where it has
one and it is asked for; advantages are normalised within the group as TRL's own
worker does. Every sampled turn records the policy version current when it was
sampled; a group whose oldest turn is more than ``max_staleness`` versions behind
at scoring is dropped. The episodes in flight are bounded by a semaphore.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ors_gym.sampling import SamplingError, TokenSampler
from ors_gym.scoring import ascore_group
from ors_gym.tokens import AsyncTokenBatch, Backends, EpisodeRow, Trajectory, stops

__all__ = ["EpisodeResult", "GroupScorer", "LoopSettings", "run_groups"]

logger = logging.getLogger("ors_gym")


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
    stop_ids: tuple[int, ...]
    max_groups: int | None = None
    token_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeResult:
    """One ended episode: its record, the policy version of each sampled turn (in
    order), each step's wall time, and whether its environment scores groups."""

    trajectory: Trajectory
    versions: list[int]
    tool_s: list[float]
    wall_s: float = 0.0
    sampler_failed: bool = False
    groups_scored: bool = False


class _Hooks:
    """What the loop reports to its owner (the worker's thread-side state)."""

    def __init__(self, version: Callable[[], int], beat: Callable[[], None],
                 emit: Callable[[list[Any]], Awaitable[None]],
                 metrics: Callable[[dict[str, Any]], None],
                 idle: Callable[[], None] = lambda: None) -> None:
        self.version, self.beat, self.emit, self.metrics = version, beat, emit, metrics
        self.idle = idle


async def run_episode(row: EpisodeRow, tokenizer: Any, sampler: TokenSampler,
                      backends: Backends, settings: LoopSettings, hooks: _Hooks) -> EpisodeResult:
    """Play one episode to its end, sampling each turn as soon as the last step returned."""
    batch = AsyncTokenBatch(tokenizer, max_tokens=settings.max_tokens, backends=backends,
                            **settings.token_kwargs)
    began = time.monotonic()
    try:
        (ids,), _ = await batch.reset([row])
        traj = batch.trajectories[0]
        result = EpisodeResult(traj, [], [])
        if not traj.done:
            result.groups_scored = bool(batch.envs[0].tools.supports_score_group)
            hooks.beat()
        while not traj.done:
            used = sum(len(r.completion_ids) for r in traj.rows)
            budget = settings.max_tokens - used
            room = None if settings.max_model_len is None else settings.max_model_len - len(ids)
            if room is not None and room < budget:
                budget = room
            if budget <= 0:
                full = used >= settings.max_tokens
                await batch.end(stops.MAX_TOKENS if full else stops.CONTEXT_OVERFLOW)
                break
            version = hooks.version()
            try:
                sample = await sampler.sample(
                    ids, max_tokens=budget, stop_token_ids=settings.stop_ids,
                    temperature=settings.temperature, top_p=settings.top_p, logprobs=True)
                if sample.finish_reason == "abort":
                    raise SamplingError("the server aborted the request")
            except SamplingError as exc:
                logger.warning("an episode of %s ends unsampled (env_error): %s", row.env_id, exc)
                result.sampler_failed = True
                await batch.end(stops.ENV_ERROR)
                break
            result.versions.append(version)
            hooks.beat()
            action = {"ids": sample.ids, "logprobs": sample.logprobs, "policy_version": version}
            started = time.monotonic()
            obs, *_ = await batch.step([action])
            result.tool_s.append(time.monotonic() - started)
            hooks.beat()
            ids = obs[0]
        result.wall_s = time.monotonic() - began
        return result
    finally:  # the session is given back even when the worker stops mid-episode
        await asyncio.shield(batch.close())


class GroupScorer:
    """A group's rewards and advantages, and TRL's ``RolloutSample`` of each trained row."""

    def __init__(self, settings: LoopSettings, backends: Backends, sample_class: type) -> None:
        self.settings = settings
        self.backends = backends
        self.sample_class = sample_class

    async def rewards(self, row: EpisodeRow, results: Sequence[EpisodeResult]
                      ) -> tuple[list[float], list[float] | None]:
        """Each episode's reward (NaN where nothing can be graded) and the group scores."""
        graded = [not (r.sampler_failed or r.trajectory.failed
                       or r.trajectory.stop_reason == stops.CONTEXT_OVERFLOW) for r in results]
        rewards = [r.trajectory.reward if ok else math.nan for r, ok in zip(results, graded,
                                                                          strict=True)]
        wanted = self.settings.score_group
        supported = any(r.groups_scored for r in results)
        if wanted is False or not supported or not any(graded):
            if wanted and not supported:
                raise ValueError(f"score_group=True, but {row.env_id} does not score groups "
                                 "(its tools list says supports_score_group=false)")
            return rewards, None
        members = [r.trajectory.messages for r, ok in zip(results, graded, strict=True) if ok]
        scorer = self.backends.env(row)
        try:
            await scorer.reset(seed=row.seed, options=row.options)
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
            for row, versions in _row_versions(traj, result.versions, current):
                if not any(row.mask):
                    continue
                prompt = [0] * len(row.prompt_ids)
                turn = _first_assistant(traj.messages, row.first_message)
                out.append(self.sample_class(
                    prompt=list(traj.messages[:turn]),
                    completion=list(traj.messages[turn:]),
                    input_ids=np.asarray(row.ids, dtype=np.int64),
                    completion_mask=np.asarray([*prompt, *row.mask], dtype=np.int64),
                    old_log_probs=np.asarray([*(0.0 for _ in prompt), *row.logprobs],
                                             dtype=np.float32),
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


def _row_versions(traj: Trajectory, versions: list[int], current: int
                  ) -> Iterator[tuple[Any, list[int]]]:
    """Each row with the versions of the turns sampled in it (the episode's all, when the
    rows' turn counts do not add up to the versions recorded)."""
    exact = sum(r.turns for r in traj.rows) == len(versions)
    start = 0
    for row in traj.rows:
        mine = versions[start : start + row.turns] if exact else versions
        start += row.turns
        yield row, (mine or [current])


def repeat_rows(rows: Sequence[EpisodeRow]) -> Iterator[tuple[int, EpisodeRow]]:
    """(group id, row): the rows in order, again and again."""
    return enumerate(itertools.cycle(rows))


async def run_groups(rows: Sequence[EpisodeRow], tokenizer: Any, sampler: TokenSampler,
                     settings: LoopSettings, hooks: _Hooks, sample_class: type,
                     fatal: Callable[[BaseException], None]) -> None:
    """Start episodes as slots free up, group by group, until cancelled; each group is
    scored and emitted by a task of its own. On the way out every episode is cancelled and
    its session given back, and the backends are closed."""
    backends = Backends()
    scorer = GroupScorer(settings, backends, sample_class)
    slots = asyncio.Semaphore(settings.max_episodes)
    tasks: set[asyncio.Task[Any]] = set()

    def track(task: asyncio.Task[Any]) -> None:
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def episode(row: EpisodeRow) -> EpisodeResult:
        try:
            return await run_episode(row, tokenizer, sampler, backends, settings, hooks)
        finally:
            slots.release()

    async def group(group_id: int, row: EpisodeRow, episodes: list[asyncio.Task[EpisodeResult]],
                    began: float) -> None:
        try:
            results = await asyncio.gather(*episodes)
            await _score(scorer, group_id, row, results, hooks, settings, began)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug or bad input, not an episode's failure
            fatal(exc)
            raise

    try:
        for group_id, row in repeat_rows(rows):
            if settings.max_groups is not None and group_id >= settings.max_groups:
                break
            episodes: list[asyncio.Task[EpisodeResult]] = []
            for _ in range(settings.num_generations):
                await slots.acquire()
                if not episodes:
                    began = time.monotonic()
                task = asyncio.create_task(episode(row))
                track(task)
                episodes.append(task)
            track(asyncio.create_task(group(group_id, row, episodes, began)))
        while tasks:  # max_groups played: the last groups finish, then the loop idles
            await asyncio.gather(*list(tasks), return_exceptions=True)
        hooks.idle()
        await asyncio.Event().wait()
    finally:
        pending = list(tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.shield(backends.aclose())


async def _score(scorer: GroupScorer, group_id: int, row: EpisodeRow,
                 results: list[EpisodeResult], hooks: _Hooks, settings: LoopSettings,
                 began: float) -> None:
    current = hooks.version()
    versions = [v for r in results for v in r.versions]
    n = len(results)
    report: dict[str, Any] = {
        f"rollout/stop_{reason}_frac": (float(sum(r.trajectory.stop_reason == reason
                                                  for r in results)), float(n))
        for reason in stops.STOP_REASONS}
    latencies = [t for r in results for t in r.tool_s]
    if latencies:
        report["rollout/tool_latency_s"] = (sum(latencies), float(len(latencies)))
        report["rollout/tool_latency_max_s"] = max(latencies)
    report["rollout/turns_mean"] = (float(sum(len(r.versions) for r in results)), float(n))
    # a group's wall time against its slowest episode's own: what waiting for the group cost
    report["rollout/group_s"] = time.monotonic() - began
    report["rollout/episode_s_max"] = max(r.wall_s for r in results)
    report["rollout/sampler_errors_total"] = float(sum(r.sampler_failed for r in results))
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
