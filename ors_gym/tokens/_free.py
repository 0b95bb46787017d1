"""Free-running token episodes: each samples its next turn as soon as its own step returns,
and is handed back the moment it ends.

A lockstep batch waits, each turn, for the slowest episode's tool before any
episode samples again; with tool latencies that vary (sandboxes: from a tenth
of a second to minutes) a group then takes the sum over turns of the slowest
call. Here every episode is its own task: open, then ask the limits what it may
sample (``_room.Room``, the rule ``run_lockstep`` applies too), ``sample`` its
prompt from the :class:`~ors_gym.sampling.TokenSampler` and step, until it ends;
then its session is given back and it is yielded (:class:`EndedEpisode`), in the
order episodes end. ``max_in_flight`` bounds the episodes open at once (the next
row opens when one ends). A failure stays its episode's, the sampler's included;
bad input (an unknown id, reset options the environment refuses) raises out of
the iteration, which ends every open episode.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ors_gym.sampling import Sample, SamplingError, TokenSampler
from ors_gym.tokens._episode import BatchEpisode
from ors_gym.tokens._open import EpisodeRow
from ors_gym.tokens._room import Room, action_of
from ors_gym.tokens.trajectory import Trajectory

__all__ = ["EndedEpisode", "OnSample", "SampleSettings", "run_free"]


@dataclass(frozen=True)
class EndedEpisode:
    """An episode that has ended: its row's ``index`` and ``row``, its ``trajectory``,
    ``info``, its last step's (or failed reset's: ``info["error"]``), and ``step_s``,
    each step's wall time (the environment's part of each turn), in order."""

    index: int
    row: EpisodeRow
    trajectory: Trajectory
    info: dict[str, Any]
    step_s: tuple[float, ...] = ()


#: ``on_sample(index, answer)``: told, for observation only, what the sampler answered
#: for the episode at ``index`` (its ``Sample``, or the exception that ends the episode)
#: before the episode steps. What it returns is ignored; it must not raise.
OnSample = Callable[[int, Sample | BaseException], None]


@dataclass(frozen=True)
class SampleSettings:
    """How every episode samples: its sampler, its limits, the bridge's stop ids."""

    sampler: TokenSampler
    room: Room
    stop_ids: Sequence[int]
    temperature: float = 1.0
    top_p: float = 1.0
    on_sample: OnSample | None = None


async def run_free(episodes: Sequence[BatchEpisode], settings: SampleSettings,
                   max_in_flight: int | None) -> AsyncIterator[EndedEpisode]:
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
                ended.put_nowait(await _play(k, episode, settings))
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


async def _play(k: int, episode: BatchEpisode, settings: SampleSettings) -> EndedEpisode:
    """One episode from its reset to its end; its session given back however it ends."""
    step_s: list[float] = []
    told = settings.on_sample
    try:
        ids, info = await episode.open()
        while not episode.done:
            left = settings.room.left(episode.trajectory, len(ids))
            if isinstance(left, str):  # no room: max_tokens or context_overflow
                episode.stop(left)
                break
            try:
                got = await settings.sampler.sample(
                    ids, max_tokens=left, stop_token_ids=settings.stop_ids,
                    temperature=settings.temperature, top_p=settings.top_p, logprobs=True)
                if got.finish_reason == "abort":
                    raise SamplingError("the server aborted the request (finish_reason 'abort')")
            except Exception as exc:  # the sampler's failure: this episode's
                info = episode.fail(exc, "sampler")
                if told is not None:
                    told(k, exc)
                break
            if told is not None:
                told(k, got)
            try:
                read = episode.read(action_of(got))
            except Exception as exc:  # ids the tokenizer does not have: this episode's
                info = episode.fail(exc, "sampler")
                break
            began = time.monotonic()
            ids, _, _, _, info = await episode.play(read)
            step_s.append(time.monotonic() - began)
    finally:
        await episode.end()
    return EndedEpisode(k, episode.row, episode.trajectory, info, tuple(step_s))
