"""The lockstep driver (``run_lockstep``) over the Latency test env, over a real HTTP server
and in-process, with ``TokenSampler``s standing in for a model.

Sampling together is shown by events, never by time: each ``sample`` call waits until
every running episode of its turn has asked (a sampler called one episode at a time
waits until the bound below fails the test). Sessions are counted on the pool's backend.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs transformers and trl (the tiny tokenizer's template)",
                allow_module_level=True)

from _tiny_lm import encode, tool_call_text

from ors_gym.sampling import Sample
from ors_gym.tokens import AsyncTokenBatch, EpisodeRow, stops
from ors_gym.tokens.lockstep import run_lockstep

BOUND_S = 20.0  # a turn whose prompts never all arrive waits this long, then fails


def row(latency: dict[str, Any], length: int) -> EpisodeRow:
    return EpisodeRow("ors/Latency-v0", latency, {"task_spec": {"delay_ms": 0, "length": length}})


class Meeting:
    """A ``TokenSampler`` answering a ``wait`` call once every running episode of the turn
    has asked (``sample``, one call per episode), or in one call (``sample_batch``)."""

    def __init__(self, tok: Any, batched: bool) -> None:
        self.reply = [*encode(tok, tool_call_text("wait", {})), tok.eos_token_id]
        self.turns: list[list[int]] = []  # each turn's budgets, as asked
        self.stop_ids: set[int] = set()
        self.expected: list[int] = []  # the episodes each turn should ask for
        self._arrived: list[int] = []
        self._all_here = asyncio.Event()
        if batched:
            self.sample_batch = self._sample_batch

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), **_: Any) -> Sample:
        self._arrived.append(max_tokens)
        self.stop_ids.update(stop_token_ids)
        if len(self._arrived) == self.expected[len(self.turns)]:  # the turn's last: all go
            self.turns.append(self._arrived)
            self._arrived = []
            here, self._all_here = self._all_here, asyncio.Event()
            here.set()
        else:
            await asyncio.wait_for(self._all_here.wait(), BOUND_S)
        return Sample(self.reply, [-0.5] * len(self.reply), "stop")

    async def _sample_batch(self, prompts: Sequence[Sequence[int]], *,
                            max_tokens: Sequence[int], stop_token_ids: Sequence[int] = (),
                            **_: Any) -> list[Sample]:
        self.turns.append(list(max_tokens))
        self.stop_ids.update(stop_token_ids)
        return [Sample(self.reply, [-0.5] * len(self.reply), "stop") for _ in prompts]

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize("batched", [False, True], ids=["sample", "sample_batch"])
def test_each_turns_prompts_are_sampled_together_until_every_episode_ends(
    tok: Any, latency: dict[str, Any], batched: bool,
) -> None:
    """Episodes of 1, 3 and 2 calls: the turns ask for 3, 2, then 1 prompt, each with its
    episode's budget left and the bridge's stop ids; every session is given back."""
    sampler = Meeting(tok, batched)
    sampler.expected = [3, 2, 1]

    async def run() -> tuple[list[Any], frozenset[str], frozenset[int]]:
        async with AsyncTokenBatch(tok, max_tokens=400) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            done = await run_lockstep(batch, [row(latency, n) for n in (1, 3, 2)], sampler)
            return done, backend.open_sessions, batch.bridge.stops

    trajectories, still_open, bridge_stops = asyncio.run(run())
    assert [t.turns for t in trajectories] == [1, 3, 2]
    assert [t.stop_reason for t in trajectories] == [stops.ENV_ENDED] * 3
    assert still_open == frozenset()
    assert [len(t) for t in sampler.turns] == [3, 2, 1]
    assert sampler.stop_ids == set(bridge_stops) and tok.eos_token_id in bridge_stops
    # each budget is what the episode's row has left (its sampled and environment ids)
    mask = trajectories[2].mask
    second = next(i for i in range(1, len(mask)) if mask[i] and not mask[i - 1])
    assert sampler.turns[:2] == [[400] * 3, [400 - second] * 2]


def test_a_first_prompt_over_max_prompt_ends_unsampled_and_is_named(
    tok: Any, latency: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    sampler = Meeting(tok, batched=True)

    async def run() -> tuple[list[Any], frozenset[str]]:
        async with AsyncTokenBatch(tok, max_tokens=400) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            first, _ = await batch.reset([row(latency, 1)])
            limit = len(first[0]) - 1
            done = await run_lockstep(batch, [row(latency, 1), row(latency, 2)], sampler,
                                      max_prompt=limit, max_prompt_name="prompt_length")
            return done, backend.open_sessions

    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        trajectories, still_open = asyncio.run(run())
    assert [t.stop_reason for t in trajectories] == [stops.CONTEXT_OVERFLOW] * 2
    assert sampler.turns == [] and still_open == frozenset()
    assert "2 of 2 episodes' first prompts" in caplog.text
    assert "ors/Latency-v0" in caplog.text and "(prompt_length)" in caplog.text


def test_a_sampler_that_fails_raises_out_with_every_session_given_back(
    tok: Any, latency: dict[str, Any],
) -> None:
    class Broken:
        async def sample(self, prompt_ids: Sequence[int], **_: Any) -> Sample:
            raise RuntimeError("the engine is down")

        async def aclose(self) -> None:
            return None

    async def run() -> frozenset[str]:
        async with AsyncTokenBatch(tok) as batch:
            backend = batch.pool.env(row(latency, 1)).backend
            with pytest.raises(RuntimeError, match="the engine is down"):
                await run_lockstep(batch, [row(latency, 2), row(latency, 2)], Broken())
            return backend.open_sessions

    assert asyncio.run(run()) == frozenset()


def test_sampled_ids_are_cut_at_the_first_stop_id() -> None:
    assert stops.cut_at_stop([5, 7, 2, 9, 2], {2, 3}, keep=True) == [5, 7, 2]
    assert stops.cut_at_stop([5, 7, 2, 9, 2], {2, 3}, keep=False) == [5, 7]
    assert stops.cut_at_stop([5, 7], {2}, keep=True) == [5, 7]
    assert stops.cut_at_stop([], {2}, keep=False) == []


def test_run_free_s_limits_and_policy_versions_apply_in_lockstep_too(
    tok: Any, latency: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    """``max_model_len`` just past one reply: the first turn asks for what fits, and the
    second prompt (the reply and the environment's ids) fills it: ``context_overflow``
    after one turn, each turn's ``policy_version`` recorded. One filling it with the first
    prompt ends unsampled, said at WARNING naming ``max_model_len``. ``budget="sampled"``
    of two replies asks for two, then one, then ends with ``max_tokens``."""

    @dataclass(frozen=True)
    class Versioned(Sample):
        policy_version: int | None = None

    class Counting:
        def __init__(self) -> None:
            self.reply = [*encode(tok, tool_call_text("wait", {})), tok.eos_token_id]
            self.turns: list[list[int]] = []

        async def sample_batch(self, prompts: Sequence[Sequence[int]], *,
                               max_tokens: Sequence[int], **_: Any) -> list[Sample]:
            self.turns.append(list(max_tokens))
            return [Versioned(self.reply, None, "stop", len(self.turns)) for _ in prompts]

        async def sample(self, prompt_ids: Sequence[int], **_: Any) -> Sample:
            raise AssertionError("sample_all asks sample_batch")

        async def aclose(self) -> None:
            return None

    reply = len(Counting().reply)

    async def run() -> dict[str, tuple[list[Any], list[list[int]]]]:
        async with AsyncTokenBatch(tok, max_tokens=400) as batch:
            first, _ = await batch.reset([row(latency, 3)])
            prompt = len(first[0])
            out = {}
            for name, limits in (("fits", {"max_model_len": prompt + reply + 1}),
                                 ("filled", {"max_model_len": prompt}),
                                 ("sampled", {"max_tokens": 2 * reply, "budget": "sampled"})):
                sampler = Counting()
                done = await run_lockstep(batch, [row(latency, 3)] * 2, sampler, **limits)
                out[name] = done, sampler.turns
            return out

    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        got = asyncio.run(run())
    done, turns = got["fits"]
    assert [t.stop_reason for t in done] == [stops.CONTEXT_OVERFLOW] * 2
    assert [t.turns for t in done] == [1, 1] and turns == [[reply + 1] * 2]
    assert [t.policy_versions for t in done] == [[1], [1]]
    done, turns = got["filled"]
    assert [t.stop_reason for t in done] == [stops.CONTEXT_OVERFLOW] * 2 and turns == []
    assert "2 of 2 episodes' first prompts" in caplog.text and "(max_model_len)" in caplog.text
    done, turns = got["sampled"]
    assert [t.stop_reason for t in done] == [stops.MAX_TOKENS] * 2
    assert turns == [[2 * reply] * 2, [reply] * 2]
