"""SkyRL: token trajectories batched as SkyRL's ``GeneratorOutput``.

Real environments, a real tokenizer and chat template (``tests/_tiny_lm.py``).
The checks are SkyRL's own rules for a generator's output (its
``validate_generator_output``: one entry per row in every list field, ids,
masks and logprobs of one length, step-wise rows adjacent and ending on
``is_last_step``) and what its trainer reads (``"stop"``/``"length"``).
SkyRL's trainer package needs Python 3.12, so its checker cannot run here.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("skyrl_gym")
pytest.importorskip("trl")  # tests/_tiny_lm.py takes TRL's Qwen3 chat template

import gymnasium as gym
from _tiny_lm import answer_text, encode, non_canonical, tiny_tokenizer, tool_call_text

from ors_gym.skyrl import generator_output, skyrl_stop_reason
from ors_gym.tokens import TokenEnv, Trajectory, stops

COUNTER, QA, MATH = "ors/Counter-v0", "ors/QA-v0", "ors/Math-v0"
LIST_FIELDS = ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons",
               "rollout_logprobs", "env_metrics")


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_tokenizer()


def sampled(tok: Any, text: str) -> list[int]:
    return [*encode(tok, text), tok.eos_token_id]


def episode(tok: Any, env_id: str, index: int, texts: list[str], *, logprobs: bool = True,
            **kwargs: Any) -> tuple[Trajectory, list[list[int]]]:
    """One episode from these completions (the first non-canonical), and the ids sent."""
    env = TokenEnv(gym.make(env_id), tok, **kwargs)
    env.reset(seed=0, options={"index": index})
    sent = []
    for k, text in enumerate(texts):
        ids = sampled(tok, text)
        ids = non_canonical(tok, ids) if k == 0 else ids
        sent.append(ids)
        action: Any = {"ids": ids, "logprobs": [-0.1 * (k + 1)] * len(ids)} if logprobs else ids
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    env.close()
    return env.trajectory, sent


def counter(tok: Any, **kwargs: Any) -> tuple[Trajectory, list[list[int]]]:
    return episode(tok, COUNTER, 0, [
        tool_call_text("increment", {"amount": 3}, think="I add three."),
        tool_call_text("increment", {"amount": 3}),
        tool_call_text("done", {}),
    ], **kwargs)


def check_skyrl_rules(out: dict[str, Any], *, step_wise: bool = False) -> None:
    """SkyRL's ``validate_generator_output`` rules, as its source states them."""
    n = len(out["response_ids"])
    assert n > 0 and len(out["prompt_token_ids"]) == n
    for key in LIST_FIELDS:
        if isinstance(out.get(key), list):
            assert len(out[key]) == n, key
    for i in range(n):
        assert len(out["response_ids"][i]) == len(out["loss_masks"][i])
        if out["rollout_logprobs"]:
            assert len(out["rollout_logprobs"][i]) == len(out["response_ids"][i])
    assert all(not isinstance(r, list) for r in out["rewards"])
    assert set(out["stop_reasons"]) <= {"stop", "length", "abort"}  # vLLM's finish reasons
    assert isinstance(out["rollout_metrics"], dict)
    if step_wise:
        assert out["is_last_step"][-1] is True
        ids = out["trajectory_ids"]
        for i in range(n - 1):
            assert (ids[i] != ids[i + 1]) <= out["is_last_step"][i]
        starts = [ids[i] for i in range(n) if i == 0 or ids[i] != ids[i - 1]]
        assert len(starts) == len(set(starts))  # each trajectory's rows adjacent


def test_a_batch_carries_each_trajectorys_own_tokens(tok: Any) -> None:
    count, sent = counter(tok)
    qa, _ = episode(tok, QA, 0, [tool_call_text("hint", {}), answer_text("Paris")])
    wrong, _ = episode(tok, QA, 1, [answer_text("Paris")])
    out = generator_output([count, qa, wrong])
    check_skyrl_rules(out)
    assert out["rewards"] == [1.0, 1.0, 0.0] == [count.reward, qa.reward, wrong.reward]
    assert out["stop_reasons"] == ["stop"] * 3
    assert out["prompt_token_ids"][0] == count.prompt_ids
    assert out["response_ids"][0] == count.completion_ids
    assert out["loss_masks"][0] == count.mask and out["rollout_logprobs"][0] == count.logprobs
    # the sampled ids, verbatim (the first a non-canonical split), are the mask-1 tokens
    response, mask = out["response_ids"][0], out["loss_masks"][0]
    assert [t for t, m in zip(response, mask, strict=True) if m] == [t for ids in sent for t in ids]
    assert out["rollout_logprobs"][0][: len(sent[0])] == [-0.1] * len(sent[0])
    assert all(lp == 0.0 for lp, m in zip(out["rollout_logprobs"][0], mask, strict=True) if not m)
    assert out["env_metrics"][0] == {"stop_reason": "env_ended", "turns": 3,
                                     "renderer": count.renderer,
                                     "policy_versions": [None] * 3, "reward_parts": {}}
    assert out["rollout_metrics"]["generate/max_num_tokens"] == max(map(len, out["response_ids"]))
    assert "is_last_step" not in out and "trajectory_ids" not in out


def test_a_token_budget_cut_is_length_and_the_rest_stop(tok: Any) -> None:
    cut, _ = counter(tok, max_tokens=60)
    assert cut.stop_reason == "max_tokens"
    out = generator_output([cut])
    check_skyrl_rules(out)
    assert out["stop_reasons"] == ["length"]
    assert out["env_metrics"][0]["stop_reason"] == "max_tokens"
    assert {r: skyrl_stop_reason(r) for r in stops.STOP_REASONS} == {
        "completed": "stop", "env_ended": "stop", "max_turns": "stop", "max_tokens": "length",
        "context_overflow": "length", "parse_error": "stop", "env_error": "abort",
        "timeout": "abort"}
    with pytest.raises(ValueError, match="unknown stop reason 'finished'"):
        skyrl_stop_reason("finished")


def test_without_the_samplers_logprobs_the_field_is_none(tok: Any) -> None:
    with_lp, _ = counter(tok)
    without, _ = counter(tok, logprobs=False)
    assert generator_output([without])["rollout_logprobs"] is None
    assert generator_output([with_lp, without])["rollout_logprobs"] is None  # all or nothing


def test_step_wise_rows_are_adjacent_and_end_on_the_last_step(tok: Any) -> None:
    # Math nudges a reply without a tool call: the template drops the reasoning, a new row
    two_rows, _ = episode(tok, MATH, 0, [
        answer_text("Three?", think="23-20 is 3."),
        tool_call_text("submit", {"answer": "3"}),
    ])
    assert len(two_rows.rows) == 2 and two_rows.reward == 1.0
    count, _ = counter(tok)
    out = generator_output([two_rows, count], step_wise=True, trajectory_ids=["m", "c"])
    check_skyrl_rules(out, step_wise=True)
    assert out["is_last_step"] == [False, True, True]
    assert out["trajectory_ids"] == ["m", "m", "c"]
    assert out["rewards"] == [sum(two_rows.rewards[:1]), sum(two_rows.rewards[1:]), 1.0]
    assert sum(out["rewards"][:2]) == two_rows.reward
    assert out["response_ids"][0] == two_rows.rows[0].completion_ids
    assert out["prompt_token_ids"][1] == two_rows.rows[1].prompt_ids
    # not step-wise: the last row only, with the whole return
    flat = generator_output([two_rows])
    assert flat["response_ids"] == [two_rows.completion_ids] and flat["rewards"] == [1.0]


def test_bad_input_is_refused_with_the_fix(tok: Any) -> None:
    env = TokenEnv(gym.make(QA), tok)
    env.reset(seed=0, options={"index": 0})
    with pytest.raises(ValueError, match="still running"):
        generator_output([env.trajectory])
    env.close()
    with pytest.raises(ValueError, match="at least one"):
        generator_output([])
    done, _ = counter(tok)
    with pytest.raises(ValueError, match="one per trajectory"):
        generator_output([done], trajectory_ids=["a", "b"])
