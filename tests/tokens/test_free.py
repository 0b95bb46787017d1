"""Free-running token episodes (``AsyncTokenBatch.run_free``) over the Latency test env,
over a real HTTP server and in-process.

Overlap is shown by events, never by time: one episode's sampler waits until another
episode has been handed back, which only happens if that other episode samples and steps
its later turns on its own (in lockstep both would wait for each other until the bound
below fails the test). Sessions are counted on the pool's backend.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from contextlib import aclosing
from typing import Any

import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs transformers and trl (the tiny tokenizer's template)",
                allow_module_level=True)

from _tiny_lm import encode, tool_call_text

from ors_gym.tokens import AsyncTokenBatch, EndedEpisode, EpisodeRow, Turn, stops

BOUND_S = 20.0  # what failed to overlap waits this long, then fails


def row(latency: dict[str, Any], length: int, **spec: Any) -> EpisodeRow:
    return EpisodeRow("ors/Latency-v0", latency,
                      {"task_spec": {"delay_ms": 0, "length": length, **spec}})


def waiting(tok: Any) -> list[int]:
    return [*encode(tok, tool_call_text("wait", {})), tok.eos_token_id]


def test_each_episode_runs_on_its_own_and_is_handed_back_as_it_ends(
    tok: Any, latency: dict[str, Any],
) -> None:
    """Episode 1's second turn is sampled only once episode 0 (three turns) has been handed
    back: so episode 0 sampled and stepped its later turns while episode 1 waited."""

    async def run() -> tuple[list[int], list[int], list[tuple[int, int]]]:
        first_back = asyncio.Event()
        sampled: list[tuple[int, int]] = []
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            open_at_hand_back: list[int] = []

            async def sample(turn: Turn) -> dict[str, Any]:
                if turn.index == 1 and turn.trajectory.turns == 1:
                    await asyncio.wait_for(first_back.wait(), BOUND_S)
                sampled.append((turn.index, turn.trajectory.turns))
                return {"ids": waiting(tok), "policy_version": turn.trajectory.turns}

            order = []
            async with aclosing(batch.run_free([row(latency, 3), row(latency, 2)], sample)) as it:
                async for ended in it:
                    assert isinstance(ended, EndedEpisode) and ended.trajectory.done
                    order.append(ended.index)
                    open_at_hand_back.append(len(backend.open_sessions))
                    first_back.set()
            assert backend.open_sessions == frozenset()
            assert batch.trajectories == []  # the lockstep batch is untouched
        return order, open_at_hand_back, sampled

    order, open_at_hand_back, sampled = asyncio.run(run())
    assert order == [0, 1]
    assert open_at_hand_back == [1, 0]  # episode 0's session was given back as it ended
    assert sampled.index((0, 2)) < sampled.index((1, 1))  # its last turn, before 1's second


def test_a_bound_on_episodes_in_flight_and_results_as_in_lockstep(
    tok: Any, latency: dict[str, Any],
) -> None:
    parts = {"speed": 0.5}

    async def run() -> tuple[list[EndedEpisode], int, list[int]]:
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            seen: list[int] = []

            async def sample(turn: Turn) -> list[int]:
                seen.append(len(backend.open_sessions))
                await asyncio.sleep(0)  # let the others run: the bound must hold them
                return waiting(tok)

            rows = [row(latency, 2, reward_parts=parts, delays_ms=[0, 1]) for _ in range(5)]
            async with aclosing(batch.run_free(rows, sample, max_in_flight=2)) as it:
                ended = [e async for e in it]
            return ended, len(backend.open_sessions), seen

    ended, left, seen = asyncio.run(run())
    assert sorted(e.index for e in ended) == list(range(5)) and left == 0
    assert max(seen) == 2  # two at once, never more
    for e in ended:
        traj = e.trajectory
        assert traj.stop_reason == stops.ENV_ENDED and traj.turns == 2 and traj.mask.count(1)
        assert traj.reward_parts == {"speed": 1.0} and e.info["reward_parts"] == parts


def test_a_failure_stays_with_its_episode(
    tok: Any, latency: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    """A reset that fails (a task the environment refuses), a sampler that raises, ids
    outside the vocabulary, a sampler with no room left, one that names the reason
    (context_overflow) and one that names no stop reason each end their own episode;
    the fifth goes on to its end."""

    async def run() -> dict[int, EndedEpisode]:
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend

            def sample(turn: Turn) -> Any:  # a plain function is fine too
                if turn.index == 1:
                    raise RuntimeError("the inference server went away")
                if turn.index == 2:
                    return [10**9]
                if turn.index in (5, 6):
                    return stops.CONTEXT_OVERFLOW if turn.index == 5 else "too long"
                return None if turn.index == 3 else waiting(tok)

            rows = [row(latency, 1, delays_ms="slow"), *(row(latency, 1) for _ in range(6))]
            with caplog.at_level(logging.WARNING, logger="ors_gym"):
                got = {e.index: e async for e in batch.run_free(rows, sample)}
            assert backend.open_sessions == frozenset()
            return got

    got = asyncio.run(run())
    assert got[0].trajectory.stop_reason == stops.ENV_ERROR and "delays_ms" in got[0].info["error"]
    assert got[1].trajectory.stop_reason == stops.ENV_ERROR
    assert got[1].info["error"] == "RuntimeError: the inference server went away"
    assert got[2].trajectory.stop_reason == stops.ENV_ERROR and "token id" in got[2].info["error"]
    assert got[3].trajectory.stop_reason == stops.MAX_TOKENS and got[3].trajectory.turns == 0
    assert got[4].trajectory.stop_reason == stops.ENV_ENDED and got[4].trajectory.reward == 0.0
    assert got[5].trajectory.stop_reason == stops.CONTEXT_OVERFLOW
    assert got[6].trajectory.stop_reason == stops.ENV_ERROR
    assert "'too long', which is not a stop reason" in got[6].info["error"]
    warned = [r for r in caplog.records if "its sampler raised" in r.getMessage()]
    assert len(warned) == 3 and all(r.exc_info and r.levelname == "WARNING" for r in warned)


def test_bad_input_raises_and_closing_early_ends_every_episode(
    tok: Any, latency: dict[str, Any],
) -> None:
    async def run() -> None:
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            with pytest.raises(ValueError, match="unknown environment id"):
                batch.run_free([EpisodeRow("ors/Nowhere-v0")], lambda turn: None)
            with pytest.raises(ValueError, match="max_in_flight must be"):
                async for _ in batch.run_free([row(latency, 1)], lambda t: None, max_in_flight=0):
                    pass
            gate = asyncio.Event()

            async def sample(turn: Turn) -> list[int]:
                if turn.index > 0:
                    await gate.wait()  # never set: these run until the iteration closes
                return waiting(tok)

            async with aclosing(batch.run_free([row(latency, 1)] * 3, sample)) as it:
                async for ended in it:
                    assert ended.index == 0 and len(backend.open_sessions) == 2
                    break
            assert backend.open_sessions == frozenset()  # closing ended the other two

    asyncio.run(run())
