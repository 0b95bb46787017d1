"""Free-running token episodes: each samples its next turn as soon as its own step returns,
and is handed back the moment it ends.

A lockstep batch waits, each turn, for the slowest episode's tool before any
episode samples again; with tool latencies that vary (sandboxes: from a tenth
of a second to minutes) a group then takes the sum over turns of the slowest
call. Here every episode is its own task: open, then ``sample`` and step
until it ends, then its session is given back and it is yielded
(:class:`EndedEpisode`), in the order episodes end. ``max_in_flight`` bounds
the episodes open at once (the next row opens when one ends). A failure stays
its episode's, the sampler's included; bad input (an unknown id, reset options
the environment refuses) raises out of the iteration, which ends every open
episode.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ors_gym.tokens import stops
from ors_gym.tokens._episode import BatchEpisode
from ors_gym.tokens._open import EpisodeRow
from ors_gym.tokens.trajectory import Trajectory

__all__ = ["EndedEpisode", "Sampler", "Turn", "run_free"]


@dataclass(frozen=True)
class Turn:
    """What the sampler gets for one turn of one episode: ``index`` (the row's position),
    ``row``, ``ids`` (the prompt to continue) and the ``trajectory`` so far."""

    index: int
    row: EpisodeRow
    ids: list[int]
    trajectory: Trajectory


@dataclass(frozen=True)
class EndedEpisode:
    """An episode that has ended: its row's ``index`` and ``row``, its ``trajectory``, and
    ``info``, its last step's (or failed reset's: ``info["error"]``)."""

    index: int
    row: EpisodeRow
    trajectory: Trajectory
    info: dict[str, Any]


#: ``sample(turn)``: the turn's action (sampled ids, or ``{"ids", "logprobs",
#: "policy_version"}``), awaited or not; None ends the episode with ``max_tokens`` (the
#: sampler has no room left for it), and a stop reason (``stops.CONTEXT_OVERFLOW``...)
#: ends it with that reason. Not a sampler itself: the model is asked through an
#: :class:`ors_gym.sampling.TokenSampler` inside it (as the asynchronous worker's does).
Sampler = Callable[[Turn], Awaitable[Any] | Any]


def _reason(name: str) -> str:
    if name not in stops.STOP_REASONS:
        raise ValueError(f"the sampler ended an episode with {name!r}, which is not a stop "
                         f"reason: return one of {stops.STOP_REASONS}, or None (max_tokens)")
    return name


async def run_free(
    episodes: Sequence[BatchEpisode], sample: Sampler, max_in_flight: int | None
) -> AsyncIterator[EndedEpisode]:
    """Run ``episodes`` free; yield each as it ends. Closing the iteration early (``break``
    inside ``contextlib.aclosing``) ends the episodes still running, sessions given back."""
    if max_in_flight is not None and (isinstance(max_in_flight, bool)
                                      or not isinstance(max_in_flight, int)
                                      or max_in_flight < 1):
        raise ValueError(f"max_in_flight must be a positive int or None, got {max_in_flight!r}")
    gate = asyncio.Semaphore(max_in_flight or max(1, len(episodes)))
    ended: asyncio.Queue[EndedEpisode | BaseException] = asyncio.Queue()

    async def one(k: int, episode: BatchEpisode) -> None:
        try:
            async with gate:
                ended.put_nowait(await _play(k, episode, sample))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # bad input: raised out of the iteration
            ended.put_nowait(exc)

    tasks = [asyncio.create_task(one(k, e)) for k, e in enumerate(episodes)]
    try:
        for _ in tasks:
            got = await ended.get()
            if isinstance(got, BaseException):
                raise got
            yield got
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _play(k: int, episode: BatchEpisode, sample: Sampler) -> EndedEpisode:
    """One episode from its reset to its end; its session given back however it ends."""
    try:
        ids, info = await episode.open()
        while not episode.done:
            try:
                action = sample(Turn(k, episode.row, list(ids), episode.trajectory))
                if inspect.isawaitable(action):
                    action = await action
                if action is None or isinstance(action, str):
                    episode.stop(stops.MAX_TOKENS if action is None else _reason(action))
                    break
                read = episode.read(action)
            except Exception as exc:  # the sampler's failure, or its ids: this episode's
                info = episode.fail(exc, "sampler")
                break
            ids, _, _, _, info = await episode.play(read)
    finally:
        await episode.end()
    return EndedEpisode(k, episode.row, episode.trajectory, info)
