"""RecordTrajectories / read_trajectories: round trips, interruptions, secrets."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import ors_gym  # noqa: F401 - registers ors/... ids
from ors_gym.env import OrsEnv
from ors_gym.formats import as_action
from ors_gym.protocol import ImageBlock, TextBlock
from ors_gym.scripted import ScriptedLLM
from ors_gym.serving import ServerThread
from ors_gym.trajectories import FORMAT, read_trajectories, trajectory_messages
from ors_gym.wrappers import DiscreteToolActions
from ors_gym.wrappers.conversation import Conversation
from ors_gym.wrappers.recording import RecordTrajectories
from tests._test_envs import Probe

FAR = {"size": 5, "start": [0, 0], "goal": [4, 4]}  # eight moves from start to goal


def _play(env: gym.Env[Any, Any], llm: ScriptedLLM, **reset: Any) -> float:
    obs, _ = env.reset(**reset)
    llm.reset()
    total, done = 0.0, False
    while not done:
        action = as_action(llm.act(obs, env.unwrapped.tools))
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    return total


def test_finished_episodes_round_trip(make_env: Any, tmp_path: Path) -> None:
    path = tmp_path / "runs" / "math.jsonl"
    env = RecordTrajectories(make_env("Math"), path)
    llm = ScriptedLLM("openai", seed=0)
    returns = [_play(env, llm, options={"index": i}) for i in range(3)]
    assert env.episodes_written == 3 and path.exists()  # written as each episode ended
    assert len(read_trajectories(path)) == 3
    env.close()

    episodes = read_trajectories(path)
    assert [e["index"] for e in episodes] == [0, 1, 2]
    assert [e["total_reward"] for e in episodes] == returns == [1.0, 1.0, 1.0]
    first = episodes[0]
    assert first["format"] == FORMAT and first["env_name"] == "math" and first["split"] == "train"
    assert first["complete"] and first["terminated"] and first["ended_by"] == "terminated"
    assert first["prompt"].startswith(first["task_spec"]["question"])
    assert [t["name"] for t in first["tools"]] == ["submit"]
    (step,) = first["steps"]
    call = step["action"]["tool_calls"][0]
    assert step["tool_calls"] == [
        {"id": call["id"], "name": "submit", "arguments": json.loads(call["function"]["arguments"])}
    ]
    (result,) = step["results"]
    assert result["tool_call_id"] == call["id"] and result["content"] == [
        {"type": "text", "text": "Correct!"}
    ]
    assert result["metadata"]["correct"] is True and step["observation"] == "Correct!"
    assert (step["reward"], step["terminated"], step["truncated"]) == (1.0, True, False)


def test_images_as_summaries_or_base64(tmp_path: Path) -> None:
    for mode in ("summary", "base64"):
        path = tmp_path / f"{mode}.jsonl"
        env = RecordTrajectories(gym.make("ors/GridWorld-v0"), path, images=mode)
        _play(env, ScriptedLLM("hermes", seed=0), options={"index": 0})
        env.close()
        (episode,) = read_trajectories(path)
        prompt_image = episode["prompt_content"][1]
        assert prompt_image["mime"] == "image/png" and prompt_image["shape"] == [160, 160, 3]
        image = episode["steps"][0]["results"][0]["content"][1]
        assert image["shape"] == [160, 160, 3]
        assert ("data" in image) is (mode == "base64")
        messages = trajectory_messages(episode)
        reply = messages[2].blocks[0]
        inner = reply.blocks[1]  # type: ignore[union-attr]
        if mode == "base64":
            assert isinstance(inner, ImageBlock) and inner.data == image["data"]
        else:
            assert inner == TextBlock(text="[image image/png 160x160, not recorded]")
    with pytest.raises(ValueError, match="images='pixels'"):
        RecordTrajectories(gym.make("ors/Math-v0"), tmp_path / "x.jsonl", images="pixels")  # type: ignore[arg-type]


def test_trajectory_messages_match_the_conversation(make_env: Any, tmp_path: Path) -> None:
    path = tmp_path / "conv.jsonl"
    conv = Conversation(make_env("GridWorld"), "ors")
    env = RecordTrajectories(conv, path, images="base64")
    messages, _ = env.reset(options={"task_spec": FAR})
    llm = ScriptedLLM("anthropic", seed=2)
    for _ in range(3):
        messages, *_ = env.step(llm.act(messages, env.unwrapped.tools))
    env.step("thinking aloud")  # nudge feedback
    env.step([{"name": "move", "arguments": {"direction": "down"}},
              {"name": "move", "arguments": "{bad json"}])  # a parse note next to a result
    expected = conv.ors_messages
    env.close()  # the unfinished episode is written now

    (episode,) = read_trajectories(path)
    assert not episode["complete"] and episode["ended_by"] == "close" and episode["length"] == 5
    assert episode["steps"][0]["action"][0]["type"] == "text"  # the model's output as given

    def strip(messages: list[Any]) -> list[Any]:
        dumped = [m.model_dump(mode="json") for m in messages]
        for m in dumped:
            for b in m["blocks"]:
                b["detail"] = None
                for inner in b.get("blocks", []):
                    inner["detail"] = None
        return dumped

    assert strip(trajectory_messages(episode)) == strip(expected)


def test_reset_mid_episode_writes_it_unfinished(make_env: Any, tmp_path: Path) -> None:
    path = tmp_path / "grid.jsonl"
    env = RecordTrajectories(make_env("GridWorld"), path)
    env.reset(options={"task_spec": FAR})
    env.step({"tool_calls": [{"name": "move", "arguments": {"direction": "down"}}]})
    env.reset(options={"task_spec": FAR})  # abandons the first episode
    env.reset(options={"task_spec": FAR})  # an episode without steps is not written
    env.close()
    (episode,) = read_trajectories(path)
    assert not episode["complete"] and episode["ended_by"] == "reset" and episode["length"] == 1


def test_discrete_actions_are_recorded_from_the_calls_made(tmp_path: Path) -> None:
    path = tmp_path / "discrete.jsonl"
    env = RecordTrajectories(DiscreteToolActions(gym.make("ors/GridWorld-v0")), path)
    env.reset(seed=0)
    env.step(1)
    env.close()
    (episode,) = read_trajectories(path)
    (step,) = episode["steps"]
    assert step["action"] == 1
    assert step["tool_calls"][0]["name"] == "move" and step["tool_calls"][0]["id"] == "call_1_0"
    assert step["results"][0]["tool_call_id"] == "call_1_0"


_KILLED_RUN = textwrap.dedent(
    """
    import sys
    import gymnasium as gym
    import ors_gym
    from ors_gym.scripted import ScriptedLLM
    from ors_gym.formats import as_action
    from ors_gym.wrappers.recording import RecordTrajectories

    env = RecordTrajectories(gym.make("ors/GridWorld-v0"), sys.argv[1])
    llm = ScriptedLLM("openai", seed=0)
    far = {"size": 5, "start": [0, 0], "goal": [4, 4]}
    for _ in range(3):
        obs, _ = env.reset(options={"task_spec": far})
        llm.reset()
        done = False
        while not done:
            action = as_action(llm.act(obs, env.unwrapped.tools))
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    obs, _ = env.reset(options={"task_spec": far})
    env.step(as_action(llm.act(obs, env.unwrapped.tools)))
    print("MID-EPISODE", flush=True)
    sys.stdin.read()  # wait here until killed
    """
)


def test_a_killed_run_keeps_every_finished_episode(tmp_path: Path) -> None:
    path = tmp_path / "killed.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUN, str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "MID-EPISODE"
    finally:
        proc.kill()
        proc.wait()
    episodes = read_trajectories(path, strict=True)
    assert len(episodes) == 3 and all(e["complete"] for e in episodes)
    assert [e["length"] for e in episodes] == [8, 8, 8]
    assert all(e["total_reward"] == pytest.approx(1.0 - 7 * 0.01) for e in episodes)


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    env = RecordTrajectories(gym.make("ors/Math-v0"), path)
    llm = ScriptedLLM("hermes", seed=0)
    for i in range(3):
        _play(env, llm, options={"index": i})
    env.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # the last write cut short

    with pytest.warns(RuntimeWarning, match="the last line is not a complete JSON record"):
        episodes = read_trajectories(path)
    assert [e["index"] for e in episodes] == [0, 1]
    with pytest.raises(ValueError, match="the last line"):
        read_trajectories(path, strict=True)

    # A new run appends after the torn line instead of gluing onto it.
    env = RecordTrajectories(gym.make("ors/Math-v0"), path)
    _play(env, llm, options={"index": 9})
    env.close()
    with pytest.warns(RuntimeWarning, match="line 3 is not a complete JSON record"):
        episodes = read_trajectories(path)
    assert [e["index"] for e in episodes] == [0, 1, 9]


@pytest.fixture(scope="module")
def probe_url() -> Iterator[str]:
    with ServerThread([Probe]) as srv:
        yield srv.url


SECRET = "s3cr3t-token-value-1234"
API_KEY = "sk-test-api-key-5678"


def test_no_secret_reaches_a_trajectory(probe_url: str, tmp_path: Path) -> None:
    path = tmp_path / "secrets.jsonl"
    http = OrsEnv(base_url=probe_url, env_name="probe", api_key=API_KEY,
                  secrets={"TOKEN": SECRET})
    env = RecordTrajectories(http, path, images="base64")
    _, info = env.reset(options={"index": 0})
    _, _, _, _, info = env.step({"tool_calls": [{"name": "secret_digest",
                                                 "arguments": {"name": "TOKEN"}}]})
    assert info["calls"][0]["ok"]  # the secret reached the environment...
    env.close()

    local = OrsEnv(env_class="ors_gym.envs.gridworld:GridWorld", secrets={"TOKEN": SECRET})
    env = RecordTrajectories(local, path)
    env.reset(options={"task_spec": FAR})
    env.step({"tool_calls": [{"name": "move", "arguments": {"direction": "down"}}]})
    env.close()

    text = path.read_text()
    assert len(read_trajectories(path)) == 2
    assert SECRET not in text and API_KEY not in text  # ...but not the file
    assert probe_url.split("//")[1] in text  # the server is recorded, without credentials


@pytest.mark.parametrize(("module", "name"), [("ors_gym.wrappers.recording", "Episode"),
                                             ("ors_gym.wrappers", "read_trajectories")])
def test_the_record_format_lives_only_in_trajectories(module: str, name: str) -> None:
    import importlib

    with pytest.raises(AttributeError, match=name):
        getattr(importlib.import_module(module), name)


def test_an_unknown_name_on_the_recording_module_is_still_an_attribute_error() -> None:
    import ors_gym.wrappers.recording as recording

    with pytest.raises(AttributeError, match="no_such_name"):
        recording.no_such_name  # noqa: B018
