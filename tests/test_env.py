"""OrsEnv against the real bundled environments, over HTTP and in-process."""

from __future__ import annotations

import gc
import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import ors_gym
from ors_gym import _cleanup
from ors_gym.env import Elapsed, OrsEnv
from ors_gym.envs import BUNDLED
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.errors import (
    OrsActionError,
    OrsConnectionError,
    OrsError,
    OrsRequestError,
    OrsSessionExpired,
)

CALL_KEYS = {
    "id", "name", "input", "ok", "reward", "finished", "metadata", "error", "error_reason",
    "seconds", "blocks",
}


def submit(answer: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "submit", "arguments": {"answer": answer}}]}


# Sandbox is left out: check_env steps with action_space.sample(), and Sandbox's bash tool
# runs real shell commands on this machine, so random strings would run as commands.
# tests/envs/test_sandbox_env.py drives it with scripted calls instead.
@pytest.mark.parametrize("name", sorted({*BUNDLED, *TEST_ENVS} - {"Sandbox"}))
def test_check_env_passes(make_env: Any, name: str) -> None:
    # Echo's `fail` tool raises on purpose: under on_error="truncate" that ends the episode.
    env = make_env(name, on_error="truncate" if name == "Echo" else "raise")
    check_env(env, skip_render_check=True)


def test_seeded_task_sequence_is_reproducible(make_env: Any) -> None:
    def sequence(seed: int) -> list[Any]:
        env = make_env("Math")
        first = env.reset(seed=seed)[1]["index"]
        return [first] + [env.reset()[1]["index"] for _ in range(5)]

    assert sequence(7) == sequence(7)
    assert sequence(7) != sequence(8)


def test_reset_options_choose_the_task(make_env: Any) -> None:
    env = make_env("Math")
    _, info = env.reset(options={"index": 3})
    assert (info["split"], info["index"]) == ("train", 3)
    assert info["task_spec"]["id"] == "train-3"  # index-only env: read through /task

    _, info = env.reset(options={"split": "test"})
    assert info["split"] == "test" and info["task_spec"]["id"].startswith("test-")

    spec = {"question": "What is 2 + 2?", "answer": 4}
    obs, info = env.reset(options={"task_spec": spec})
    assert "2 + 2" in obs["text"] and info["task_spec"] == spec and info["index"] is None

    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"task": 1})
    with pytest.raises(OrsRequestError):
        env.reset(options={"split": "nosuch"})


def test_reset_info_describes_the_episode(make_env: Any) -> None:
    env = make_env("QA")
    obs, info = env.reset(seed=1)
    assert obs["text"] and obs["images"] == ()
    assert info["session_id"] == env.session_id
    assert [t["name"] for t in info["tools"]] == ["hint"]
    assert info["terminal_tool"] == {"name": "answer", "arg": "answer", "description": info[
        "terminal_tool"]["description"]}


def test_submit_correct_and_wrong_answers(make_env: Any) -> None:
    env = make_env("Math")
    _, info = env.reset(options={"index": 0})
    answer = info["task_spec"]["answer"]
    obs, reward, terminated, truncated, info = env.step(submit(answer))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert "Correct" in obs["text"]
    (call,) = info["calls"]
    assert set(call) == CALL_KEYS
    assert call["ok"] and call["finished"] and call["name"] == "submit"
    assert isinstance(call["seconds"], Elapsed) and call["seconds"] >= 0

    env.reset(options={"index": 0})
    _, reward, terminated, _, _ = env.step(submit(answer + 1))
    assert (reward, terminated) == (0.0, True)


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "submit", "arguments": {"answer": ANSWER}}',
        'Sure.\n<tool_call>{"name": "submit", "arguments": {"answer": ANSWER}}</tool_call>',
        '[{"name": "submit", "arguments": "{\\"answer\\": ANSWER}"}]',
        'I will submit.\n```json\n{"name": "submit", "arguments": {"answer": ANSWER}}\n```',
    ],
)
def test_text_tool_call_formats(make_env: Any, text: str) -> None:
    env = make_env("Math")
    _, info = env.reset(options={"index": 5})
    action = text.replace("ANSWER", json.dumps(info["task_spec"]["answer"]))
    _, reward, terminated, _, info = env.step(action)
    assert [c["name"] for c in info["calls"]] == ["submit"]
    assert (reward, terminated) == (1.0, True)


def test_calls_run_in_order_and_stop_at_finished(make_env: Any) -> None:
    env = make_env("Counter")
    _, info = env.reset(options={"task_spec": {"target": 2}})
    inc = {"name": "increment", "arguments": {"amount": 1}}
    action = {"tool_calls": [inc, inc, {"name": "done", "arguments": {}}, inc]}
    obs, reward, terminated, _, info = env.step(action)
    assert [c["name"] for c in info["calls"]] == ["increment", "increment", "done"]
    assert (reward, terminated) == (1.0, True)
    assert "[done]" in obs["text"]


def test_terminal_tool_with_an_argument_grades_the_message(make_env: Any) -> None:
    env = make_env("QA")
    _, info = env.reset(options={"index": 0})
    answer = str(info["task_spec"]["answer"])
    _, reward, terminated, _, info = env.step(answer)
    assert [c["name"] for c in info["calls"]] == ["answer"]
    assert info["calls"][0]["input"] == {"answer": answer}
    assert (reward, terminated) == (1.0, True)

    env.reset(options={"index": 0})
    _, reward, terminated, _, _ = env.step({"message": "certainly not the answer"})
    assert (reward, terminated) == (0.0, True)


def test_terminal_tool_without_argument_grades_state(make_env: Any) -> None:
    env = make_env("Counter")
    env.reset(options={"task_spec": {"target": 1}})
    env.step({"tool_calls": [{"name": "increment", "arguments": {}}]})
    _, reward, terminated, _, info = env.step("I am done.")
    assert info["calls"][0]["name"] == "done" and info["calls"][0]["input"] == {}
    assert (reward, terminated) == (1.0, True)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("nudge", (False, False)), ("terminate", (True, False)), ("truncate", (False, True))],
)
def test_no_tool_call_policies(make_env: Any, policy: str, expected: tuple[bool, bool]) -> None:
    env = make_env("Math", no_tool_call=policy, error_reward=-0.5)
    env.reset(options={"index": 0})
    obs, reward, terminated, truncated, info = env.step("I think the answer is 4.")
    assert (terminated, truncated) == expected
    assert info["calls"] == [] and info["error_reason"] == "no_tool_call"
    if policy == "nudge":
        assert "submit" in obs["text"] and reward == -0.5
    else:
        assert info["truncation_reason" if truncated else "termination_reason"] == "no_tool_call"


def test_no_tool_call_error_policy_raises(make_env: Any) -> None:
    env = make_env("Math", no_tool_call="error")
    env.reset(options={"index": 0})
    with pytest.raises(OrsActionError, match="no tool calls"):
        env.step("hello")


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ({"tool_calls": [{"name": "nosuch", "arguments": {}}]}, "not_found"),
        ({"tool_calls": [{"name": "submit", "arguments": {"answer": "four"}}]}, "input_validation"),
        ({"tool_calls": [{"name": "submit", "arguments": {}}]}, "input_validation"),
        ('<tool_call>{"name": "submit", "arguments": {answer: 4</tool_call>', "parse_error"),
    ],
)
def test_agent_mistakes_are_observations(make_env: Any, action: Any, reason: str) -> None:
    env = make_env("Math", error_reward=-0.25)
    env.reset(options={"index": 0})
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["error_reason"] == reason
    assert (reward, terminated, truncated) == (-0.25, False, False)
    assert obs["text"]


def test_call_after_the_episode_finished(make_env: Any) -> None:
    env = make_env("Math")
    _, info = env.reset(options={"index": 0})
    env.step(submit(info["task_spec"]["answer"]))
    obs, reward, terminated, _, info = env.step(submit(0))
    assert info["error_reason"] == "episode_finished"
    # Gymnasium's contract stays visible: the episode is still over.
    assert reward == 0.0 and terminated and "finished" in obs["text"]


def test_agent_mistakes_read_like_a_model_needs_them(make_env: Any) -> None:
    env = make_env("Math")
    env.reset(options={"index": 0})
    obs, _, _, _, info = env.step({"tool_calls": [{"name": "sbumit", "arguments": {}}]})
    expected = "Error: 'sbumit' is not a valid tool; did you mean 'submit'? Tools: submit."
    assert obs["text"] == expected
    assert info["calls"][0]["error"] == "'sbumit' is not a valid tool"  # the server's own words
    obs, _, _, _, info = env.step(submit("not a number"))
    lines = obs["text"].splitlines()
    assert lines[0] == "Error: The arguments of 'submit' are invalid:"
    assert lines[1].startswith("answer: Input should be a valid number")
    assert lines[1].endswith("got 'not a number'.") and "https://" not in obs["text"]
    assert "errors.pydantic.dev" in info["calls"][0]["error"]  # raw detail kept in info
    obs, _, _, _, _ = env.step({"tool_calls": [{"name": "submit", "arguments": {}}]})
    assert obs["text"].splitlines()[1] == "answer: Field required."


def test_repr_names_the_env_and_summarises_images(make_env: Any, backend_kind: str) -> None:
    env = make_env("GridWorld")
    assert "gridworld" in repr(env) and "?" not in repr(env)  # before any reset
    obs, _ = env.reset(seed=0)
    text = repr(obs)
    assert "<array shape=(" in text and "dtype=uint8>" in text and len(text) < 1000
    assert isinstance(obs, dict) and obs == {"text": obs["text"], "images": obs["images"]}


def test_render_without_images_and_human_mode() -> None:
    env = OrsEnv(env_class=BUNDLED["Math"], render_mode="rgb_array")
    try:
        env.reset(options={"index": 0})
        with pytest.warns(UserWarning, match="no image"):
            assert env.render() is None
        assert env.render() is None  # warned once only
    finally:
        env.close()
    with pytest.raises(ValueError, match="rgb_array"):
        OrsEnv(env_class=BUNDLED["Math"], render_mode="human")


def test_malformed_actions_raise_clear_errors(make_env: Any) -> None:
    env = make_env("Math")
    env.reset(options={"index": 0})
    for bad in (42, None, {"tool_calls": "submit"}, {"bogus": 1}):
        with pytest.raises(OrsActionError):
            env.step(bad)
    with pytest.raises(OrsError, match="reset"):
        make_env("Math").step("hello")


def test_image_observations(make_env: Any) -> None:
    env = make_env("GridWorld")
    obs, info = env.reset(seed=0)
    size = info["task_spec"]["size"]
    (image,) = obs["images"]
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert image.shape[0] % size == 0
    obs, *_ = env.step({"tool_calls": [{"name": "move", "arguments": {"direction": "up"}}]})
    assert obs["images"][0].shape == image.shape
    assert env.observation_space.contains(obs)

    fixed = make_env("GridWorld", image_size=(16, 24))
    obs, _ = fixed.reset(seed=0)
    assert obs["images"][0].shape == (16, 24, 3)
    assert fixed.observation_space.contains(obs)


def test_max_steps_truncates_with_a_reason(make_env: Any) -> None:
    env = make_env("Counter", max_steps=2)
    env.reset(options={"task_spec": {"target": 9}})
    inc = {"tool_calls": [{"name": "increment", "arguments": {}}]}
    assert env.step(inc)[3] is False
    _, _, terminated, truncated, info = env.step(inc)
    assert (terminated, truncated, info["truncation_reason"]) == (False, True, "max_steps")


def test_render_modes(make_env: Any) -> None:
    env = make_env("GridWorld", render_mode="ansi")
    env.reset(seed=0)
    env.step({"tool_calls": [{"name": "move", "arguments": {"direction": "left"}}]})
    text = env.render()
    assert "[prompt]" in text and "move" in text
    env = make_env("GridWorld", render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    assert np.array_equal(env.render(), obs["images"][0])


def test_sampled_actions_pass_server_validation(make_env: Any) -> None:
    for name in ("Toolbox", "GridWorld", "Counter", "Math"):
        env = make_env(name)
        for seed in range(40):
            env.reset(seed=seed)
            env.action_space.seed(seed)
            action = env.action_space.sample()
            assert env.action_space.contains(action)
            _, _, _, _, info = env.step(action)
            for call in info["calls"]:
                assert call["error_reason"] != "input_validation", (name, action, call)


def test_task_tools_join_the_action_space(make_env: Any) -> None:
    env = make_env("Toolbox")
    _, info = env.reset(options={"index": 0})
    names = {t["name"] for t in info["tools"]}
    assert set(info["task_spec"]["tools"]) <= names
    assert {t.name for t in env.action_space.tools} == names


def test_reset_hands_out_a_new_space_and_leaves_the_old_one_alone(make_env: Any) -> None:
    env = make_env("Toolbox")
    before = env.action_space
    shared = {t.name for t in before.tools}
    _, info = env.reset(options={"index": 0})
    after = env.action_space
    assert after is not before
    assert {t.name for t in before.tools} == shared  # the space the user held is unchanged
    assert {t.name for t in after.tools} == {t["name"] for t in info["tools"]} != shared
    env.reset(options={"index": 0})
    assert env.action_space is after  # same tools: the same space


def test_close_is_idempotent_and_deletes_the_session(backend_kind: str, server_url: str) -> None:
    from ors_gym.env import make_backend

    if backend_kind == "http":
        backend = make_backend(base_url=server_url)
    else:
        backend = make_backend(env_class=BUNDLED["Math"])
    try:
        env = OrsEnv(backend=backend, env_name="math")
        env.reset(seed=0)
        sid = env.session_id
        assert sid is not None
        backend.ping(sid)
        env.close()
        env.close()
        assert env.session_id is None
        with pytest.raises(OrsSessionExpired):
            backend.ping(sid)
    finally:
        backend.close()


def test_gym_make_bundled_ids_run_in_process() -> None:
    assert "ors/GridWorld-v0" in gym.registry
    env = gym.make("ors/Math-v0")
    try:
        _obs, info = env.reset(seed=0)
        assert env.unwrapped.location == "in-process"
        assert env.spec is not None and env.spec.max_episode_steps == 4
        _, reward, terminated, _, _ = env.step(submit(info["task_spec"]["answer"]))
        assert (reward, terminated) == (1.0, True)
    finally:
        env.close()


def test_gym_make_remote_and_register_server(server_url: str) -> None:
    env = gym.make("ors/Remote-v0", base_url=server_url, env_name="counter")
    try:
        _, info = env.reset(seed=0)
        assert info["env_name"] == "counter"
    finally:
        env.close()
    ids = ors_gym.register_server(server_url, max_episode_steps=7)
    assert "ors-remote/GridWorld-v0" in ids and "ors-remote/Math-v0" in ids
    env = gym.make("ors-remote/Math-v0")
    try:
        assert env.unwrapped.location.startswith("http://127.0.0.1")
        assert env.spec is not None and env.spec.max_episode_steps == 7
        env.reset(seed=0)
    finally:
        env.close()


def test_secrets_and_api_key_stay_out_of_reprs(server_url: str) -> None:
    env = gym.make(
        "ors/Remote-v0",
        base_url=server_url,
        env_name="math",
        api_key="sk-very-secret-key",
        secrets={"TOKEN": "hunter2-secret"},
    )
    try:
        env.reset(seed=0)
        shown = " ".join([repr(env), str(env), repr(env.spec), repr(env.unwrapped.backend)])
        assert "sk-very-secret-key" not in shown and "hunter2-secret" not in shown
    finally:
        env.close()


def test_forgotten_envs_do_not_leak_sessions(server: Any, server_url: str) -> None:
    before = set(server.sdk_server._active_envs)
    for i in range(5):
        env = OrsEnv(base_url=server_url, env_name="math")
        env.reset(seed=i)
        del env
    gc.collect()
    assert _cleanup.flush()
    assert set(server.sdk_server._active_envs) == before


@pytest.mark.slow
def test_reset_close_cycles_leave_no_session_open(server: Any, server_url: str) -> None:
    before = set(server.sdk_server._active_envs)
    env = OrsEnv(base_url=server_url, env_name="counter")
    for i in range(200):
        env.reset(seed=i)
        assert len(set(server.sdk_server._active_envs) - before) == 1
    env.close()
    assert set(server.sdk_server._active_envs) == before


def _start_cli_server(port: int = 0) -> tuple[Any, str]:
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "ors_gym", "serve", "math", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # the server prints its URL once bound
        if "serving" in line:
            return proc, line.rsplit(" ", 1)[-1].strip()
    raise AssertionError(f"server exited with {proc.wait()} before printing its URL")


def _stop(proc: Any) -> None:
    proc.kill()
    proc.wait(timeout=30)


@pytest.mark.parametrize("on_error", ["raise", "truncate"])
def test_server_killed_mid_episode(on_error: str) -> None:
    proc, url = _start_cli_server()
    try:
        env = OrsEnv(
            base_url=url, on_error=on_error, backend_options={"max_retries": 1, "backoff": 0.05}
        )
        _, info = env.reset(seed=0)
        sid = env.session_id
        _stop(proc)
        if on_error == "raise":
            with pytest.raises(OrsConnectionError) as err:
                env.step(submit(0))
            assert "127.0.0.1" in str(err.value) and str(sid) in str(err.value)
        else:
            _obs, _, terminated, truncated, info = env.step(submit(0))
            assert (terminated, truncated) == (False, True)
            assert info["truncation_reason"] == "session_lost" and info["error"]
        # A fresh server on the same port (in this process: only the killed one needs its own)
        from ors_gym.serving import ServerThread

        with ServerThread([BUNDLED["Math"]], port=int(url.rsplit(":", 1)[1])) as fresh:
            assert fresh.url == url
            _, info = env.reset(seed=1)
            assert info["session_id"] != sid
            env.close()
    finally:
        _stop(proc)


def test_bundled_ids_take_a_base_url_to_use_a_server(server: Any, server_url: str) -> None:
    env = gym.make("ors/Counter-v0", base_url=server_url)
    try:
        _, info = env.reset(seed=0)
        assert env.unwrapped.location.startswith("http://127.0.0.1")
        assert info["env_name"] == "counter"
        assert info["session_id"] in server.sdk_server._active_envs
    finally:
        env.close()
