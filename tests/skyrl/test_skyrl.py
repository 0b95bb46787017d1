"""SkyRL: ORS episodes through ``OrsTextEnv``, driven as SkyRL's generator drives an env.

The generator makes one env per dataset row with ``skyrl_gym.make(env_class,
env_config=..., extras=row)``, calls ``init(prompt)``, ``step(text)`` until
``done``, then ``close()``. Episodes run in-process and over HTTP.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("skyrl_gym")

import skyrl_gym

from ors_gym.serving import ServerThread
from ors_gym.skyrl import OrsTextEnv, register, rows


def live(server: ServerThread) -> set[str]:
    return set(server.sdk_server._active_envs)  # type: ignore[attr-defined]


def episode(env_class: str, row: dict[str, Any], replies: list[str]) -> tuple[
    list[dict[str, Any]], list[dict[str, Any]], OrsTextEnv
]:
    """One episode as SkyRL's generator runs it; returns the conversation and step outputs."""
    env = skyrl_gym.make(env_class, env_config={}, extras=row)
    assert isinstance(env, OrsTextEnv)
    conversation, _ = env.init(row["prompt"])
    outputs: list[dict[str, Any]] = []
    try:
        for reply in replies:
            out = env.step(reply)
            outputs.append(dict(out))
            conversation += [{"role": "assistant", "content": reply}, *out["observations"]]
            if out["done"]:
                break
    finally:
        env.close()
    return conversation, outputs, env


def test_a_plain_reply_goes_to_the_terminal_tool_in_process() -> None:
    name = register()
    row = rows("ors/QA-v0", num_tasks=2)[0]
    assert row == {"prompt": [], "env_class": "ors", "env_id": "ors/QA-v0", "split": "train",
                   "index": 0}
    conversation, outputs, env = episode(name, row, ["Paris", "unused"])
    assert conversation[0]["role"] == "system" and "<tool_call>" in conversation[0]["content"]
    assert '"name": "hint"' in conversation[0]["content"]
    assert "final answer" in conversation[0]["content"]  # QA has a terminal tool
    assert conversation[1] == {"role": "user", "content": (
        "What is the capital of France?\nReply with just the answer (a word or a name).")}
    assert [(o["reward"], o["done"]) for o in outputs] == [(1.0, True)]
    assert outputs[0]["observations"] == []
    assert env.env.session_id is None  # close() deleted it


def test_tool_calls_in_text_then_the_terminal_tool() -> None:
    register()
    row = rows("ors/Counter-v0", num_tasks=1)[0]  # target 6, from 0
    replies = [
        'Up by five. <tool_call>{"name": "increment", "arguments": {"amount": 5}}</tool_call>',
        '{"name": "increment", "arguments": {}}',
        "I am done.",
    ]
    conversation, outputs, _ = episode("ors", row, replies)
    assert [o["done"] for o in outputs] == [False, False, True]
    assert outputs[0]["metadata"]["calls"] == ["increment"]
    assert outputs[0]["observations"][0]["role"] == "user"
    assert "<tool_response>" in outputs[0]["observations"][0]["content"]
    assert outputs[-1]["reward"] == 1.0  # counter at 6 when the terminal tool `done` ran
    assert conversation[-1] == {"role": "assistant", "content": "I am done."}


def test_over_http_with_an_image_env_and_no_terminal_tool(server: ServerThread) -> None:
    before = live(server)
    name = register("ors_http", base_url=server.url)
    row = rows("ors/GridWorld-v0", num_tasks=1, env_class=name, base_url=server.url)[0]
    env = skyrl_gym.make(name, env_config={}, extras=row)
    conversation, _ = env.init([{"role": "system", "content": "Be brief."}])
    assert conversation[0] == {"role": "system", "content": "Be brief."}  # the row's own
    assert "image(s) not shown" in conversation[1]["content"]
    assert len(live(server) - before) == 1
    out = env.step('<tool_call>{"name": "move", "arguments": {"direction": "down"}}</tool_call>')
    assert (out["reward"], out["done"]) == (-0.01, False)
    assert "Moved down" in out["observations"][0]["content"]
    out = env.step("No tool this time.")  # no terminal tool: a plain reply ends the episode
    assert out["done"] and out["reward"] == 0.0
    env.close()
    assert live(server) == before


def test_max_turns_ends_an_episode_and_bad_rows_are_explained(server: ServerThread) -> None:
    row = {"env_id": "ors/Math-v0", "index": 0, "max_turns": 1,
           "env_kwargs": {"base_url": server.url}}
    env = skyrl_gym.make(register(), env_config={}, extras=row)
    env.init([])
    out = env.step('{"name": "submit", "arguments": {"answer": 4}}')  # task 0's answer is 3
    assert (out["reward"], out["done"]) == (0.0, True)
    env.close()
    with pytest.raises(ValueError, match="env_id"):
        OrsTextEnv({}, {"index": 0})


def test_reward_parts_reach_the_step_metadata_and_the_metrics() -> None:
    from ors_gym.envs.testing import Latency
    from ors_gym.registration import register_class

    class PartsLatency(Latency):
        """Latency whose one task gives named reward parts with each call."""

        @classmethod
        def list_tasks(cls, split: str) -> Any:
            return [{"id": "parts", "delay_ms": 0, "length": 2, "reward_parts": {"a": 0.5}}]

    register()
    env_id = register_class(PartsLatency, "ors/PartsLatency-v0")
    call = '<tool_call>{"name": "wait", "arguments": {}}</tool_call>'
    _, outputs, env = episode("ors", rows(env_id, num_tasks=1)[0], [call, call])
    assert [o["metadata"]["reward_parts"] for o in outputs] == [{"a": 0.5}, {"a": 0.5}]
    assert env.get_metrics() == {"turns": 2, "return": 0.0, "reward_parts/a": 1.0}
