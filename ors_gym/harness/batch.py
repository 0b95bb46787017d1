"""N harness episodes at once, and their trajectories as one trainer batch.

:func:`run_batch` plays a harness on N episodes concurrently (at most
``concurrency`` at a time) with one runner: each episode gets its own ORS session,
MCP endpoint, capture session, process group and working directory, released
whatever it does; an episode that fails to start comes back as a
``harness_failed`` episode with an empty trajectory, so one crash never costs the
batch. :func:`as_trainer_batch` lays the trajectories out in a trainer's field
names: TRL, veRL and SkyRL through ``ors_gym.gateway.as_batch``; Tinker as its
``Datum`` fields (inputs and targets shifted by one, the sampling logprobs and
weights aligned with the targets).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ors_gym.gateway import as_batch
from ors_gym.harness.runner import HarnessEpisode, HarnessRunner
from ors_gym.harness.spec import Harness
from ors_gym.tokens import Trajectory, stops

__all__ = ["Progress", "as_trainer_batch", "failed_episode", "run_batch"]

logger = logging.getLogger("ors_gym")

Progress = Callable[[int, int, HarnessEpisode], None]


async def run_batch(runner: HarnessRunner, harness: Harness, make_env: Callable[[int], Any],
                    n: int, *, options: Callable[[int], dict[str, Any] | None] | None = None,
                    seed: int | None = None, concurrency: int | None = None,
                    deadline: float = 600.0,
                    progress: Progress | bool = False) -> list[HarnessEpisode]:
    """Play ``harness`` on ``n`` episodes: episode ``i``'s env is ``make_env(i)`` (an
    ``AsyncOrsEnv``), reset with ``options(i)`` and seed ``seed + i``; at most
    ``concurrency`` run at once (default: all). ``progress``: called with (done, n,
    episode) as each ends, or True for a line on stderr. The episodes, in order."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if concurrency is not None and (isinstance(concurrency, bool)
                                    or not isinstance(concurrency, int) or concurrency < 1):
        raise ValueError(f"concurrency must be a positive int (episodes at once) or None (all "
                         f"at once), got {concurrency!r}")
    limit = asyncio.Semaphore(concurrency or n)
    report = _stderr if progress is True else (progress or None)
    done = 0

    async def one(i: int) -> HarnessEpisode:
        nonlocal done
        async with limit:
            try:
                episode = await runner.run(
                    harness, make_env(i), options=options(i) if options else None,
                    seed=None if seed is None else seed + i, deadline=deadline)
            except Exception as exc:
                episode = failed_episode(harness, exc, i)
        done += 1
        if report is not None and not isinstance(report, bool):
            report(done, n, episode)
        return episode

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def failed_episode(harness: Harness, exc: BaseException, i: int | None = None
                   ) -> HarnessEpisode:
    """The episode of a run that failed before it had one (logged at WARNING)."""
    logger.warning("harness episode %s failed to run: %s: %s", "" if i is None else i,
                   type(exc).__name__, exc)
    return HarnessEpisode(
        harness=harness.name, stop="harness_failed", exit_status=None,
        trajectory=Trajectory(rows=[], messages=[], tools=[], stop_reason=stops.ENV_ERROR),
        error=f"{type(exc).__name__}: {exc}")


def _stderr(done: int, n: int, episode: HarnessEpisode) -> None:
    print(f"ors-gym harness: {done}/{n} {episode.harness}: {episode.stop}, "
          f"reward {episode.reward:g}, {episode.seconds:.1f} s", file=sys.stderr, flush=True)


def as_trainer_batch(episodes: Sequence[HarnessEpisode],
                     trainer: str = "trl") -> dict[str, list[Any]]:
    """The episodes' trajectories as one batch in ``trainer``'s field names (``"trl"``,
    ``"verl"``, ``"skyrl"``, ``"tinker"``): one sample per row; ``"episode"`` says
    which episode a sample came from. Episodes with no turn give no sample."""
    trajectories = [e.trajectory for e in episodes]
    if trainer != "tinker":
        return as_batch(trajectories, trainer)
    batch: dict[str, list[Any]] = {}
    for episode, traj in enumerate(trajectories):
        for row in traj.rows:
            ids = row.ids
            weights = [0] * len(row.prompt_ids) + list(row.mask)
            logprobs = [0.0] * len(row.prompt_ids) + list(row.logprobs)
            sample = {"model_input": ids[:-1], "target_tokens": ids[1:],
                      "weights": weights[1:], "logprobs": logprobs[1:],
                      "reward": traj.reward,
                      "stop_reason": stops.TINKER.get(traj.stop_reason or "", "completed"),
                      "episode": episode}
            for key, value in sample.items():
                batch.setdefault(key, []).append(value)
    return batch
