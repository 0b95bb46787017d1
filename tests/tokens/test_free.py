"""Free-running token episodes (``AsyncTokenBatch.run_free``) over the Latency test env,
over a real HTTP server and in-process, with ``TokenSampler``s standing in for a model.

Overlap is shown by events, never by time: one episode's sampler waits until another
episode has been handed back, which only happens if that other episode samples and steps
its later turns on its own (in lockstep both would wait for each other until the bound
below fails the test). Sessions are counted on the pool's backend. The samplers tell the
episodes apart by their prompts (each row's ``delay_ms`` is in its first user message)
and a turn by the tool replies so far.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs transformers and trl (the tiny tokenizer's template)",
                allow_module_level=True)

from _tiny_lm import encode, tool_call_text

from ors_gym.sampling import Sample, SamplingError
from ors_gym.tokens import AsyncTokenBatch, EndedEpisode, EpisodeRow, stops

BOUND_S = 20.0  # what failed to overlap waits this long, then fails


def row(latency: dict[str, Any], length: int, delay_ms: int = 0, **spec: Any) -> EpisodeRow:
    return EpisodeRow("ors/Latency-v0", latency,
                      {"task_spec": {"delay_ms": delay_ms, "length": length, **spec}})


def waiting(tok: Any) -> list[int]:
    return [*encode(tok, tool_call_text("wait", {})), tok.eos_token_id]


@dataclass(frozen=True)
class Versioned(Sample):
    """A sample naming the policy version that sampled it."""

    policy_version: int | None = None


@dataclass(frozen=True)
class Asked:
    """One request: whose (the row's ``delay_ms``), which turn (from 1), its budget."""

    episode: int
    turn: int
    max_tokens: int
    stop_ids: frozenset[int]


class Script:
    """A ``TokenSampler`` answering each request with ``reply(asked)`` (awaited), cut to
    the request's ``max_tokens``; every request is kept in ``asked``."""

    def __init__(self, tok: Any, reply: Callable[[Asked], Awaitable[Sample]]) -> None:
        self.tok, self.reply = tok, reply
        self.asked: list[Asked] = []

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), **_: Any) -> Sample:
        text = self.tok.decode(list(prompt_ids))
        episode = int(text.split("each call takes ")[1].split(" ms")[0])
        asked = Asked(episode, text.count("waited ") + 1, max_tokens, frozenset(stop_token_ids))
        self.asked.append(asked)
        got = await self.reply(asked)
        return Versioned(got.ids[:max_tokens], got.logprobs and got.logprobs[:max_tokens],
                         got.finish_reason, getattr(got, "policy_version", None))

    async def aclose(self) -> None:
        return None


def test_each_episode_runs_on_its_own_and_is_handed_back_as_it_ends(
    tok: Any, latency: dict[str, Any],
) -> None:
    """Episode 1's second turn is sampled only once episode 0 (three turns) has been handed
    back: so episode 0 sampled and stepped its later turns while episode 1 waited. Each
    turn is asked with the bridge's stop ids, carries the policy version its sample names,
    and ``on_sample`` is told every answer."""
    first_back = asyncio.Event()
    sampled: list[tuple[int, int]] = []  # (episode, turn) in the order they were answered

    async def reply(asked: Asked) -> Sample:
        if asked.episode == 1 and asked.turn == 2:
            await asyncio.wait_for(first_back.wait(), BOUND_S)
        sampled.append((asked.episode, asked.turn))
        return Versioned(waiting(tok), None, "stop", 10 * asked.episode + asked.turn)

    sampler = Script(tok, reply)
    told: list[tuple[int, Any]] = []

    async def run() -> tuple[list[EndedEpisode], list[int], frozenset[int]]:
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            open_at_hand_back: list[int] = []
            order = []
            rows = [row(latency, 3), row(latency, 2, delay_ms=1)]
            on_sample = lambda k, answer: told.append((k, answer))  # noqa: E731
            async with aclosing(batch.run_free(rows, sampler, on_sample=on_sample)) as it:
                async for ended in it:
                    assert isinstance(ended, EndedEpisode) and ended.trajectory.done
                    order.append(ended)
                    open_at_hand_back.append(len(backend.open_sessions))
                    first_back.set()
            assert backend.open_sessions == frozenset()
            assert batch.trajectories == []  # the lockstep batch is untouched
            return order, open_at_hand_back, batch.bridge.stops

    order, open_at_hand_back, bridge_stops = asyncio.run(run())
    assert [e.index for e in order] == [0, 1]
    assert open_at_hand_back == [1, 0]  # episode 0's session was given back as it ended
    assert sampled.index((0, 3)) < sampled.index((1, 2))  # its last turn, before 1's second
    assert {a.stop_ids for a in sampler.asked} == {bridge_stops}
    assert [e.trajectory.policy_versions for e in order] == [[1, 2, 3], [11, 12]]
    assert [len(e.step_s) for e in order] == [3, 2] and min(order[0].step_s) >= 0.0
    assert sorted(k for k, _ in told) == [0, 0, 0, 1, 1]
    assert all(isinstance(answer, Sample) for _, answer in told)


def test_a_bound_on_episodes_in_flight_and_results_as_in_lockstep(
    tok: Any, latency: dict[str, Any],
) -> None:
    parts = {"speed": 0.5}
    seen: list[int] = []
    backend: Any = None

    async def reply(asked: Asked) -> Sample:
        seen.append(len(backend.open_sessions))
        await asyncio.sleep(0)  # let the others run: the bound must hold them
        return Sample(waiting(tok), None, "stop")

    async def run() -> tuple[list[EndedEpisode], int]:
        nonlocal backend
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            rows = [row(latency, 2, reward_parts=parts, delays_ms=[0, 1]) for _ in range(5)]
            sampler = Script(tok, reply)
            async with aclosing(batch.run_free(rows, sampler, max_in_flight=2)) as it:
                ended = [e async for e in it]
            return ended, len(backend.open_sessions)

    ended, left = asyncio.run(run())
    assert sorted(e.index for e in ended) == list(range(5)) and left == 0
    assert max(seen) == 2  # two at once, never more
    for e in ended:
        traj = e.trajectory
        assert traj.stop_reason == stops.ENV_ENDED and traj.turns == 2 and traj.mask.count(1)
        assert traj.reward_parts == {"speed": 1.0} and e.info["reward_parts"] == parts
        assert traj.policy_versions == [None, None]  # a plain Sample names no version


def test_a_failure_stays_with_its_episode(
    tok: Any, latency: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    """A reset that fails (a task the environment refuses), a sampler that raises, ids
    outside the vocabulary and an aborted request each end their own episode (the
    sampler's failures told to ``on_sample``); the fifth goes on to its end."""

    async def reply(asked: Asked) -> Sample:
        if asked.episode == 1:
            raise RuntimeError("the inference server went away")
        if asked.episode == 2:
            return Sample([10**9], None, "stop")
        if asked.episode == 3:
            return Sample(waiting(tok)[:2], None, "abort")
        return Sample(waiting(tok), None, "stop")

    told: dict[int, Any] = {}

    async def run() -> dict[int, EndedEpisode]:
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            rows = [row(latency, 1, delays_ms="slow"),
                    *(row(latency, 1, delay_ms=k) for k in range(1, 5))]
            with caplog.at_level(logging.WARNING, logger="ors_gym"):
                got = {e.index: e async for e in batch.run_free(
                    rows, Script(tok, reply), on_sample=told.__setitem__)}
            assert backend.open_sessions == frozenset()
            return got

    got = asyncio.run(run())
    assert got[0].trajectory.stop_reason == stops.ENV_ERROR and "delays_ms" in got[0].info["error"]
    assert got[1].trajectory.stop_reason == stops.ENV_ERROR
    assert got[1].info["error"] == "RuntimeError: the inference server went away"
    assert got[2].trajectory.stop_reason == stops.ENV_ERROR and "token id" in got[2].info["error"]
    assert got[3].trajectory.stop_reason == stops.ENV_ERROR and "abort" in got[3].info["error"]
    assert got[4].trajectory.stop_reason == stops.ENV_ENDED and got[4].trajectory.reward == 0.0
    assert [got[k].trajectory.turns for k in range(4)] == [0, 0, 0, 0]
    assert sorted(told) == [1, 2, 3, 4]  # the reset that failed asked for nothing
    assert isinstance(told[1], RuntimeError) and isinstance(told[3], SamplingError)
    assert isinstance(told[2], Sample)  # the sampler answered; its ids were the fault
    warned = [r for r in caplog.records if "its sampler raised" in r.getMessage()]
    assert len(warned) == 3 and all(r.exc_info and r.levelname == "WARNING" for r in warned)


def test_the_limits_are_lockstep_s(tok: Any, latency: dict[str, Any]) -> None:
    """Episodes of three turns. ``budget="sampled"`` counts the sampled ids only: twice a
    reply's length asks for that, then one reply's, then ends with ``max_tokens``; the
    batch's ``"row"`` budget charges the environment's ids between turns too. A first
    prompt over ``max_prompt``, or one filling ``max_model_len``, ends unsampled with
    ``context_overflow``; ``max_model_len`` just past the first reply caps the first
    request and ends the episode at its second prompt."""
    reply_len = len(waiting(tok))

    async def reply(asked: Asked) -> Sample:
        return Sample(waiting(tok), None, "stop")

    async def play(batch: AsyncTokenBatch, **limits: Any) -> tuple[Any, list[int]]:
        sampler = Script(tok, reply)
        async with aclosing(batch.run_free([row(latency, 3)], sampler, **limits)) as it:
            (ended,) = [e async for e in it]
        return ended.trajectory, [a.max_tokens for a in sampler.asked]

    async def run() -> dict[str, tuple[Any, list[int]]]:
        async with AsyncTokenBatch(tok, max_tokens=400) as batch:
            first, _ = await batch.reset([row(latency, 3)])
            prompt = len(first[0])
            with pytest.raises(ValueError, match="budget must be one of"):
                batch.run_free([row(latency, 1)], Script(tok, reply), budget="turn")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="max_model_len must be a positive int"):
                batch.run_free([row(latency, 1)], Script(tok, reply), max_model_len=0)
            return {
                "row": await play(batch),
                "sampled": await play(batch, max_tokens=2 * reply_len, budget="sampled"),
                "max_prompt": await play(batch, max_prompt=prompt - 1),
                "filled": await play(batch, max_model_len=prompt),
                "model_len": await play(batch, max_model_len=prompt + reply_len + 1),
            }

    got = asyncio.run(run())
    traj, asked = got["row"]
    mask = traj.mask
    second = next(i for i in range(1, len(mask)) if mask[i] and not mask[i - 1])
    assert traj.stop_reason == stops.ENV_ENDED and asked[:2] == [400, 400 - second]
    traj, asked = got["sampled"]
    assert traj.stop_reason == stops.MAX_TOKENS and asked == [2 * reply_len, reply_len]
    for name in ("max_prompt", "filled"):
        traj, asked = got[name]
        assert traj.stop_reason == stops.CONTEXT_OVERFLOW and traj.turns == 0 and asked == []
    traj, asked = got["model_len"]
    assert traj.stop_reason == stops.CONTEXT_OVERFLOW and asked == [reply_len + 1]
    assert traj.turns == 1


def test_bad_input_raises_and_closing_early_ends_every_episode(
    tok: Any, latency: dict[str, Any],
) -> None:
    gate = asyncio.Event()  # never set: the requests after the first wait until closed
    answered = 0

    async def reply(asked: Asked) -> Sample:
        nonlocal answered
        answered += 1
        if answered > 1:
            await gate.wait()
        return Sample(waiting(tok), None, "stop")

    async def run() -> None:
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            sampler = Script(tok, reply)
            with pytest.raises(ValueError, match="unknown environment id"):
                batch.run_free([EpisodeRow("ors/Nowhere-v0")], sampler)
            with pytest.raises(ValueError, match="max_in_flight must be"):
                async for _ in batch.run_free([row(latency, 1)], sampler, max_in_flight=0):
                    pass
            async with aclosing(batch.run_free([row(latency, 1)] * 3, sampler)) as it:
                async for _ in it:
                    assert len(backend.open_sessions) == 2
                    break
            assert backend.open_sessions == frozenset()  # closing ended the other two

    asyncio.run(run())
