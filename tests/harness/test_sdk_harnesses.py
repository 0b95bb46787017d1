"""Real harnesses from the package registries play a real ORS environment through the runner:
the OpenAI Agents SDK (``MCPServerStreamableHttp``, its default Responses model and its Chat
Completions model), pydantic-ai (MCP
toolsets from the ``mcpServers`` JSON file) and smolagents (``ToolCollection.from_mcp``), each in
a venv of its own, their model the gateway over the stand-in backend. The calls reach the
environment, the results reach the harness, the ids are the sampled ones with their mask and
logprobs, the ORS return is joined, a plain final answer is graded by the terminal tool, and
nothing stays open."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any, Literal

import pytest

from ors_gym import AsyncOrsEnv
from ors_gym.backends.local import AsyncLocalBackend
from ors_gym.envs import BUNDLED
from ors_gym.harness import HarnessRunner, preset
from tests.gateway.test_gateway import check_verbatim
from tests.harness._leaks import count
from tests.harness._model import counter_player, plain_answer

pytestmark = pytest.mark.slow


def _called_ids(traj: Any) -> list[str]:
    return [c["id"] for m in traj.messages if m["role"] == "assistant"
            for c in m.get("tool_calls") or ()]


@pytest.mark.parametrize(("name", "transport"), [
    ("openai-agents", "http"), ("openai-agents:chat", "http"), ("pydantic-ai", "http"),
    ("smolagents", "http"),
    ("pydantic-ai", "stdio")])  # the harness starts the stdio relay from its mcpServers file
def test_a_python_sdk_harness_plays_the_counter(
        name: str, transport: Literal["http", "stdio"], gateway: Any, backend: Any,
        script: Any, tok: Any, harness_python: str, smolagents_python: str) -> None:
    name, _, api = name.partition(":")  # openai-agents: Responses (its default), or Chat
    python = smolagents_python if name == "smolagents" else harness_python
    harness = preset(name, python=python)
    env = {**harness.env, "ORS_AGENTS_API": api} if api else harness.env
    harness = dataclasses.replace(harness, transport=transport, env=env)
    script.use(counter_player(tok))
    ors = AsyncLocalBackend(BUNDLED["Counter"])  # shared by the episode: it counts sessions

    async def main() -> Any:
        async with HarnessRunner(gateway, finish_grace=60) as runner:
            before = count(runner, ors, gateway)
            episode = await runner.run(harness, AsyncOrsEnv(backend=ors),
                                       options={"task_spec": {"target": 7}}, deadline=240)
            assert count(runner, ors, gateway) == before  # nothing left open
            assert before.endpoints == before.ors_sessions == 0
            return episode

    episode = asyncio.run(main())
    assert episode.stop == "finished" and episode.exit_status == 0, episode.stderr[-3000:]
    traj = episode.trajectory
    # the calls reached the environment, and it ended the episode with its reward
    names = [c["name"] for c in episode.calls]
    assert names[-1] == "done" and set(names[:-1]) == {"increment"}
    assert sum(c["input"]["amount"] for c in episode.calls[:-1]) == 7
    assert traj.reward == 1.0 and traj.rewards == [c["reward"] for c in episode.calls]
    assert traj.stop_reason == "completed"  # the terminal tool, called by name
    # the results reached the harness: its next requests held them (as tool messages, or
    # as smolagents' observations)
    told = json.dumps([m["content"] for m in traj.messages if m["role"] != "assistant"])
    assert "The counter is now 6." in told and "Target reached!" in told
    assert "Done." in episode.stdout
    # the ids the model sampled, verbatim, with their mask and logprobs
    check_verbatim(traj, backend.requests, tok)
    assert traj.turns == len(backend.requests)
    if name == "openai-agents":  # its default model spoke Responses: the ids are the gateway's
        said = "response id: None" if api == "chat" else "response id: resp_"
        assert said in episode.stderr, episode.stderr[-3000:]
    if name != "smolagents":  # its MCP adapter sends no _meta: the ORS ids stand
        # the harness's own call ids came with the calls (two calls of one turn included)
        assert [c["id"] for c in episode.calls] == [
            i for i in _called_ids(traj) if not i.startswith("final")][:len(episode.calls)]
        assert "call_1_1" in {c["id"] for c in episode.calls}


def test_a_plain_final_answer_is_graded_by_the_terminal_tool(
        gateway: Any, backend: Any, script: Any, tok: Any, harness_python: str) -> None:
    script.use(plain_answer(tok, "Paris"))
    ors = AsyncLocalBackend(BUNDLED["QA"])

    async def main() -> Any:
        async with HarnessRunner(gateway) as runner:
            episode = await runner.run(
                preset("openai-agents", python=harness_python), AsyncOrsEnv(backend=ors),
                options={"task_spec": {"question": "What is the capital of France?",
                                       "answer": "Paris"}}, deadline=240)
            assert count(runner, ors, gateway) == (0, 0, 0)
            return episode

    episode = asyncio.run(main())
    assert episode.stop == "harness_exited" and episode.exit_status == 0, episode.stderr
    assert episode.final_answer == "Paris"
    assert episode.calls == [{"id": None, "routed": True, "name": "answer",
                              "input": {"answer": "Paris"}, "ok": True, "reward": 1.0,
                              "finished": True, "error": None}]
    assert episode.reward == 1.0 and episode.trajectory.stop_reason == "completed"
    assert len(ors.open_sessions) == 0
