"""Named reward parts: an environment's ``ToolOutput.metadata["reward_parts"]`` summed per
name into ``Trajectory.reward_parts`` and carried into the trainer exports; bad values
logged once and ignored while the episode goes on. The Latency test environment returns
the parts its task gives, over a real HTTP server and in-process."""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs transformers and trl (the tiny tokenizer's template)",
                allow_module_level=True)

from _tiny_lm import encode, tool_call_text

from ors_gym import reward_parts
from ors_gym.tokens import EpisodeRow, TokenBatch

PARTS = {"correct": 1.0, "format": 0.25}


def wait_call(tok: Any) -> list[int]:
    return [*encode(tok, tool_call_text("wait", {})), tok.eos_token_id]


def row(latency: dict[str, Any], parts: Any, length: int = 2) -> EpisodeRow:
    spec = {"delay_ms": 0, "length": length, "reward_parts": parts}
    return EpisodeRow("ors/Latency-v0", latency, {"task_spec": spec})


def test_parts_are_summed_per_name_and_reach_every_export(
    tok: Any, latency: dict[str, Any],
) -> None:
    from ors_gym.skyrl import generator_output

    with TokenBatch(tok) as batch:
        batch.reset([row(latency, PARTS), row(latency, None)])
        _, _, _, _, infos = batch.step([wait_call(tok)] * 2)
        assert infos[0]["reward_parts"] == PARTS and infos[1]["reward_parts"] == {}
        batch.step([wait_call(tok)] * 2)
        given, plain = batch.trajectories
    assert given.done and given.reward_parts == {"correct": 2.0, "format": 0.5}
    assert plain.done and plain.reward_parts == {}
    assert given.to_verl()["extra_fields"]["reward_parts"] == given.reward_parts
    assert given.to_skyrl()["reward_parts"] == given.reward_parts
    out = generator_output([given, plain])
    assert [m["reward_parts"] for m in out["env_metrics"]] == [given.reward_parts, {}]
    assert out["rollout_metrics"]["reward_parts/correct"] == 2.0  # the mean where reported
    assert out["rollout_metrics"]["reward_parts/format"] == 0.5


def test_bad_parts_are_logged_once_and_ignored(
    tok: Any, latency: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    reward_parts._WARNED.clear()
    bad = {"correct": 1.0, "note": "high", "flag": True}
    with caplog.at_level(logging.WARNING, logger="ors_gym"), TokenBatch(tok) as batch:
        batch.reset([row(latency, bad, 3), row(latency, [1, 2], 3)])
        for _ in range(3):
            batch.step([wait_call(tok)] * 2)
        kept, listed = batch.trajectories
    assert kept.done and listed.done  # both episodes went on to their end
    assert kept.reward_parts == {"correct": 3.0} and listed.reward_parts == {}
    warned = sorted(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert len(warned) == 3  # once each: 'note', 'flag', the list; not once per step
    assert any("['note'] = 'high' is not a finite number" in w for w in warned)
    assert any("is a list, not a mapping" in w for w in warned)


def test_call_parts_reads_only_finite_numbers_under_string_names() -> None:
    reward_parts._WARNED.clear()
    assert reward_parts.call_parts(None) == {} and reward_parts.call_parts({"x": 1}) == {}
    assert reward_parts.call_parts({"reward_parts": {"a": 1, "b": float("nan"), 3: 1.0}}) == {
        "a": 1.0}
    info = {"calls": [{"metadata": {"reward_parts": {"a": 1}}}, {"metadata": None},
                      {"metadata": {"reward_parts": {"a": 0.5, "b": -1}}}]}
    assert reward_parts.step_parts(info) == {"a": 1.5, "b": -1.0}
