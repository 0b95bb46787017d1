"""The policy version of every sampled turn: read from a step's action, kept on the
``Trajectory`` one per turn (rows included), carried into each trainer's export, and
used by ``filter_stale`` to drop what spans or lags too many versions."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import gymnasium as gym
import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs transformers and trl (the tiny tokenizer's template)",
                allow_module_level=True)

from _tiny_lm import answer_text, encode, tool_call_text

from ors_gym import AsyncOrsEnv
from ors_gym.envs.counter import Counter
from ors_gym.tokens import AsyncTokenEnv, TokenBatch, TokenEnv, Trajectory, filter_stale


def said(tok: Any, text: str) -> list[int]:
    return [*encode(tok, text), tok.eos_token_id]


def counter_turns(tok: Any) -> list[list[int]]:
    return [said(tok, tool_call_text("increment", {"amount": 3})),
            said(tok, tool_call_text("increment", {"amount": 3})),
            said(tok, tool_call_text("done", {}))]


def test_each_turn_keeps_the_version_that_sampled_it_and_exports_carry_it(tok: Any) -> None:
    env = TokenEnv(gym.make("ors/Counter-v0"), tok)
    env.reset(options={"index": 0})
    a, b, c = counter_turns(tok)
    env.step({"ids": a, "policy_version": 7})
    env.step(b)  # a plain list names no version
    env.step({"ids": c, "logprobs": [-0.5] * len(c), "policy_version": 9})
    traj = env.trajectory
    assert traj.done and traj.policy_versions == [7, None, 9]
    assert traj.to_trl()["policy_versions"] == [7, None, 9]
    assert traj.to_verl()["extra_fields"]["policy_versions"] == [7, None, 9]
    assert traj.to_skyrl()["policy_versions"] == [7, None, 9]
    env.reset(options={"index": 0})  # a new episode starts with none
    assert env.trajectory.policy_versions == []


def test_versions_follow_their_rows_when_the_template_rewrites_history(tok: Any) -> None:
    env = TokenEnv(gym.make("ors/Math-v0"), tok)
    env.reset(options={"index": 0})
    env.step({"ids": said(tok, answer_text("Three?")), "policy_version": 1})  # a nudge: new row
    env.step({"ids": said(tok, tool_call_text("submit", {"answer": "3"})), "policy_version": 2})
    traj = env.trajectory
    assert traj.step_wise and traj.policy_versions == [1, 2]
    assert traj.row_versions(0) == [1] and traj.row_versions() == [2]
    assert traj.to_trl(0)["policy_versions"] == [1] and traj.to_skyrl(1)["policy_versions"] == [2]


def test_a_bad_version_is_refused_before_the_step(tok: Any) -> None:
    env = TokenEnv(gym.make("ors/Counter-v0"), tok)
    env.reset(options={"index": 0})
    for bad in ("3", 2.5, True):
        with pytest.raises(ValueError, match="policy_version must be an int"):
            env.step({"ids": counter_turns(tok)[0], "policy_version": bad})
    assert env.trajectory.turns == 0 and env.trajectory.rewards == []  # nothing ran


def test_the_async_env_and_the_batch_record_versions(tok: Any) -> None:
    async def one() -> list[int | None]:
        async with AsyncTokenEnv(AsyncOrsEnv(env_class=Counter), tok) as env:
            await env.reset(options={"index": 0})
            for version, ids in enumerate(counter_turns(tok)):
                await env.step({"ids": ids, "policy_version": version})
            return env.trajectory.policy_versions

    assert asyncio.run(one()) == [0, 1, 2]
    with TokenBatch(tok) as batch:
        batch.reset([{"env_id": "ors/Counter-v0", "index": 0}] * 2)
        for version, ids in enumerate(counter_turns(tok)):
            batch.step([{"ids": ids, "policy_version": version}, ids])
        assert [t.policy_versions for t in batch.trajectories] == [[0, 1, 2], [None] * 3]


def _with(versions: list[int | None]) -> Trajectory:
    return Trajectory(rows=[], messages=[], tools=[], policy_versions=versions)


def test_filter_stale_drops_what_spans_or_lags_too_many_versions() -> None:
    clean, spanning, old, unknown = _with([5, 5]), _with([3, None, 5]), _with([2, 2]), _with(
        [None])
    every = [clean, spanning, old, unknown]
    assert filter_stale(every) == every
    assert filter_stale(every, max_span=1) == [clean, old, unknown]
    assert filter_stale(every, max_span=2) == every
    assert filter_stale(every, current_version=6, max_lag=2) == [clean, unknown]
    assert filter_stale(every, max_span=0, current_version=6, max_lag=4) == [clean, old, unknown]
    with pytest.raises(ValueError, match="go together"):
        filter_stale(every, max_lag=1)
    with pytest.raises(ValueError, match="max_span must be"):
        filter_stale(every, max_span=-1)
