"""The Conversation wrapper and the ScriptedLLM, on the bundled envs (in-process and HTTP)."""

from __future__ import annotations

import base64
import json
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ors_gym  # noqa: F401 - registers ors/... ids
from ors_gym.env import OrsEnv
from ors_gym.formats import MESSAGE_FORMATS, tools_as
from ors_gym.protocol import Message, TextBlock, ToolCallBlock, ToolResultBlock
from ors_gym.scripted import FORMATS, ScriptedLLM
from ors_gym.wrappers.conversation import Conversation, ConversationSpace

GRID = {"size": 5, "start": [2, 2], "goal": [4, 4]}


def _conversation(make_env: Any, name: str, fmt: str, **kwargs: Any) -> Conversation:
    return Conversation(make_env(name), fmt, **kwargs)


def _texts(message: Any) -> str:
    """A rendered message (or list of them) as JSON text, whatever its format."""
    return json.dumps(message, default=lambda m: m.model_dump(mode="json"))


@pytest.mark.parametrize("fmt", MESSAGE_FORMATS)
def test_conversation_grows_with_ids_tying_results_to_calls(make_env: Any, fmt: str) -> None:
    env = _conversation(make_env, "GridWorld", fmt, system="You are a careful agent.")
    messages, info = env.reset(options={"task_spec": GRID})
    assert env.observation_space.contains(messages)
    assert "Reach the goal at [4, 4]" in _texts(messages[-1])

    first, *_ = env.step({"tool_calls": [{"name": "move", "arguments": {"direction": "down"}}]})
    second, reward, terminated, truncated, info = env.step(
        [{"type": "tool_use", "id": "toolu_9", "name": "move", "input": {"direction": "right"}}]
    )
    assert env.observation_space.contains(second)
    assert second[: len(first)] == first  # earlier turns are never rewritten
    ors = env.ors_messages
    assert [m.role for m in ors] == ["system", "user", "assistant", "user", "assistant", "user"]
    calls = [b for m in ors for b in m.blocks if isinstance(b, ToolCallBlock)]
    results = [b for m in ors for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert [c.id for c in calls] == ["call_1_0", "toolu_9"] == [r.tool_call_id for r in results]
    assert "Moved right to [3, 3]" in results[1].blocks[0].text  # type: ignore[union-attr]
    assert info["exchange"].results[0].tool_call_id == "toolu_9"
    assert info["observation"]["text"].startswith("Moved right")
    assert not terminated and not truncated and reward == pytest.approx(-0.01)

    rendered = _texts(second)
    assert "toolu_9" in rendered and "call_1_0" in rendered
    if fmt == "openai":
        assert second[0] == {"role": "system", "content": "You are a careful agent."}
        tool_msgs = [m for m in second if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tool_msgs] == ["call_1_0", "toolu_9"]
        url = second[-1]["content"][-1]["image_url"]["url"]
        assert base64.b64decode(url.split(",", 1)[1])[:4] == b"\x89PNG"
    elif fmt == "anthropic":
        assert all(m["role"] != "system" for m in second) and env.system
        result = second[-1]["content"][0]
        assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_9"
        source = result["content"][1]["source"]
        assert source["type"] == "base64" and source["media_type"] == "image/png"
    else:
        assert all(isinstance(m, Message) for m in second)


@pytest.mark.parametrize("fmt", MESSAGE_FORMATS)
def test_terminal_tool_routing_and_nudges(make_env: Any, fmt: str) -> None:
    qa = _conversation(make_env, "QA", fmt)
    qa.reset(options={"index": 0})
    messages, reward, terminated, _, info = qa.step("Paris")
    assert terminated and reward == 1.0 and info["exchange"].routed
    assert qa.ors_messages[-1].blocks == [TextBlock(text="Correct!")]
    assert "Correct!" in _texts(messages[-1]) and "tool_result" not in _texts(messages[-1])

    counter = _conversation(make_env, "Counter", fmt)
    counter.reset(options={"task_spec": {"target": 1}})
    counter.step({"tool_calls": [{"name": "increment", "arguments": {"amount": 1}}]})
    _, reward, terminated, _, _ = counter.step("All done.")  # the no-argument terminal tool
    assert terminated and reward == 1.0
    assert "Target reached" in _texts(counter.messages[-1])

    grid = _conversation(make_env, "GridWorld", fmt)
    grid.reset(options={"task_spec": GRID})
    _, _, _, _, info = grid.step("I will think first.")
    assert info["error_reason"] == "no_tool_call"
    assert "No tool was called" in _texts(grid.messages[-1])
    _, _, _, _, info = grid.step('<tool_call>{"name": "move", "arguments": {oops}}</tool_call>')
    assert info["error_reason"] == "parse_error"
    assert "could not parse tool call" in _texts(grid.messages[-1])


def test_prompt_and_messages_are_requested_once_per_episode(make_env: Any) -> None:
    env = _conversation(make_env, "GridWorld", "openai")
    backend = env.unwrapped.backend.core  # the async backend the env's core awaits
    seen: list[str] = []
    for method in ("prompt", "messages"):
        real = getattr(backend, method)

        async def spy(*args: Any, _real: Any = real, _name: str = method, **kwargs: Any) -> Any:
            seen.append(_name)
            return await _real(*args, **kwargs)

        setattr(backend, method, spy)
    env.reset(seed=0)
    env.step({"tool_calls": [{"name": "move", "arguments": {"direction": "up"}}]})
    env.messages  # noqa: B018 - the conversation so far: no request
    env.reset(seed=1)
    assert seen == ["prompt", "messages", "prompt", "messages"]


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
def test_space_and_checker(make_env: Any) -> None:
    space = ConversationSpace("anthropic")
    assert space == ConversationSpace("anthropic") != ConversationSpace("openai")
    assert space.contains(space.sample())
    assert not space.contains([{"content": "no role"}]) and not space.contains("text")
    assert not ConversationSpace("ors").contains([{"role": "user", "content": "x"}])
    ors = ConversationSpace("ors")
    assert ors.from_jsonable(ors.to_jsonable([ors.sample()]))[0][0].role == "user"
    with pytest.raises(ValueError, match="format='gemini'"):
        ConversationSpace("gemini")
    with pytest.raises(ValueError, match="format='gemini'"):
        Conversation(make_env("Math"), "gemini")

    check_env(Conversation(make_env("GridWorld"), "openai"), skip_render_check=True)
    env = Conversation(make_env("Math"), "anthropic")
    with pytest.raises(gym.error.ResetNeeded):
        env.step("4")


def test_api_tools_follow_the_format(make_env: Any) -> None:
    env = Conversation(make_env("Toolbox"), "anthropic")
    env.reset(options={"index": 0})
    assert env.api_tools() == tools_as(env.unwrapped.tools, "anthropic")
    assert env.api_tools("openai_responses")[0]["type"] == "function"
    assert Conversation(env.env, "ors").api_tools()[0].keys() == {"name", "description", "schema"}


def test_conversation_needs_an_ors_env() -> None:
    env = Conversation(gym.make("CartPole-v1"), "openai")
    with pytest.raises(TypeError, match="needs an ORS environment"):
        env.reset(seed=0)


def _run(env: Conversation, llm: ScriptedLLM, **reset: Any) -> tuple[float, int]:
    messages, _ = env.reset(**reset)
    total, steps, done = 0.0, 0, False
    while not done:
        action = llm.act(messages, env.unwrapped.tools)
        messages, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        steps += 1
        done = terminated or truncated
    return total, steps


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("conv", ["openai", "anthropic", "ors"])
def test_scripted_llm_solves_the_simple_envs(fmt: str, conv: str) -> None:
    for name, options in [("Math", {"index": 5}), ("GridWorld", {"options": {"index": 3}}),
                          ("Counter", {"index": 2}), ("Toolbox", {"index": 2})]:
        env = Conversation(gym.make(f"ors/{name}-v0"), conv)
        try:
            reset = options if "options" in options else {"options": options}
            total, _ = _run(env, ScriptedLLM(fmt, seed=1), **reset)
        finally:
            env.close()
        assert total > 0.9, (name, fmt, conv)


def test_scripted_llm_output_shapes() -> None:
    listed = OrsEnv(env_class="ors_gym.envs.math:Math")
    try:
        obs, _ = listed.reset(options={"index": 0})
        outputs = {fmt: ScriptedLLM(fmt, seed=0).act(obs, listed.tools) for fmt in FORMATS}
    finally:
        listed.close()
    openai = outputs["openai"]
    assert openai["role"] == "assistant" and openai["content"] is None
    assert isinstance(openai["tool_calls"][0]["function"]["arguments"], str)
    assert json.loads(openai["tool_calls"][0]["function"]["arguments"])["answer"] is not None
    assert [b["type"] for b in outputs["anthropic"]] == ["text", "tool_use"]
    assert [i["type"] for i in outputs["responses"]] == ["function_call"]
    assert outputs["hermes"].count("<tool_call>") == 1
    assert "```json" in outputs["json_fence"]


def test_scripted_llm_is_seeded_and_acts_randomly_without_skill() -> None:
    toolbox = OrsEnv(env_class="ors_gym.envs.toolbox:Toolbox")
    try:
        tools = tools_as(toolbox.class_tools, "openai_responses")
    finally:
        toolbox.close()

    def outputs(seed: int) -> list[Any]:
        llm = ScriptedLLM("openai", seed=seed, skill=0.0, final_answer_prob=0.3)
        return [llm.act({"text": "Configure something.", "images": ()}, tools) for _ in range(20)]

    first = outputs(3)
    assert first == outputs(3) and first != outputs(4)
    finals = [o for o in first if "tool_calls" not in o]
    calls = [o for o in first if "tool_calls" in o]
    assert finals and calls
    for output in calls:
        call = output["tool_calls"][0]["function"]
        assert call["name"] in {"submit", "configure"}
    with pytest.raises(ValueError, match="format='gpt'"):
        ScriptedLLM("gpt")
    with pytest.raises(TypeError, match="observation must be"):
        ScriptedLLM().act(42, tools)


def test_same_conversation_over_http_and_in_process(server_url: str) -> None:
    """The transcript does not depend on the transport (tool-call ids included)."""

    def transcript(env: OrsEnv) -> list[Any]:
        conv = Conversation(env, "openai")
        try:
            _run(conv, ScriptedLLM("anthropic", seed=5), options={"index": 7})
            return conv.messages
        finally:
            conv.close()

    http = transcript(OrsEnv(base_url=server_url, env_name="gridworld"))
    local = transcript(OrsEnv(env_class="ors_gym.envs.gridworld:GridWorld"))
    assert http == local and len(http) > 3
    assert any(isinstance(b, dict) and b.get("type") == "image_url"
               for m in http if isinstance(m.get("content"), list) for b in m["content"])


def test_a_multi_turn_prompt_starts_the_conversation(backend_kind: str, server_url: str) -> None:
    """An environment whose prompt is a conversation (``get_messages``): the wrapper
    starts from it, over HTTP and in-process, and ``info["messages"]`` carries it."""
    from tests._test_envs import Dialogue

    if backend_kind == "http":
        from ors_gym.serving import ServerThread

        with ServerThread([Dialogue]) as srv:
            _check_dialogue(OrsEnv(base_url=srv.url, env_name="dialogue"))
    else:
        _check_dialogue(OrsEnv(env_class=Dialogue))


def _check_dialogue(ors_env: OrsEnv) -> None:
    env = Conversation(ors_env, format="openai")
    try:
        messages, info = env.reset(seed=0)
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert messages[-1]["content"] == "And now in French?"
        assert [m.role for m in info["messages"]] == ["system", "user", "assistant", "user"]
    finally:
        env.close()
