"""Rollouts by NeMo Gym's own agent (``simple_agent``) over rows from ``ors-gym nemo-gym
dataset``, against a stand-in model server, through the agent's legacy ``/run`` and through
0.7.0's single-agent-turn Environment Server: the rewards NeMo Gym records are the ones an
``OrsEnv`` replay of the same actions gives, and no ORS session is left open.

The servers run as NeMo Gym runs them, each its own app under uvicorn on 127.0.0.1, found
through one global config by NeMo Gym's ``ServerClient``: the ORS resources server, the
agent (whose ``/run`` seeds, asks the model, calls the tools and verifies), the
Environment Server (typed seed, an agent session granted the tools, verify, close) and the
model. The model is the one stand-in: no language model runs here, so a scripted policy
answers each Responses request (``add`` until the target, then an answer, right for even
targets and wrong for odd ones). NeMo Gym's collection command (``gym eval run``) needs
mlflow, whose exporter needs Python 3.12: the agent's ``/run`` is driven directly instead.

Needs nemo-gym, which has a venv of its own: ``bash scripts/nemo-gym-venv.sh --test``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "responses_api_agents.simple_agent.app",
    reason="nemo-gym has a venv of its own: bash scripts/nemo-gym-venv.sh --test",
)

import httpx
from _envs import Graded
from _serve import Servers, resources_server
from environment_servers.single_agent_turn.app import (
    SingleAgentTurnEnvironmentServer,
    SingleAgentTurnEnvironmentServerConfig,
)
from fastapi import FastAPI
from nemo_gym.config_types import AgentServerRef, BaseServerConfig
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf
from responses_api_agents.simple_agent.app import (
    ModelServerRef,
    ResourcesServerRef,
    SimpleAgent,
    SimpleAgentConfig,
)

from ors_gym import OrsEnv
from ors_gym.cli import main
from ors_gym.nemo_gym import dataset_rows


def stand_in_model() -> FastAPI:
    """A Responses endpoint whose scripted policy reads the target from the prompt."""
    app = FastAPI()
    counter = iter(range(1_000_000))

    @app.post("/v1/responses")
    @app.post("/ng-rollout/{rollout_id}/v1/responses")  # an Environment Server's episodes
    async def responses(body: dict[str, Any]) -> dict[str, Any]:
        items = body["input"]
        prompt = next(i["content"] for i in items if i.get("role") == "user")
        target = int(re.search(r"Reach (\d+)", prompt).group(1))  # type: ignore[union-attr]
        done = sum(1 for i in items if i.get("type") == "function_call_output")
        n = next(counter)
        if done < target:
            output: dict[str, Any] = {
                "type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                "name": "add", "arguments": json.dumps({"n": 1}), "status": "completed"}
        else:
            answer = str(target if target % 2 == 0 else target + 1)
            output = {"type": "message", "id": f"msg_{n}", "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": answer, "annotations": []}]}
        return {"id": f"resp_{n}", "created_at": 0.0, "model": "stand-in",
                "object": "response", "output": [output], "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": []}

    return app


@pytest.fixture(scope="module")
def stack(ors_url: str) -> Iterator[dict[str, str]]:
    """The servers' URLs by name: the ORS resources server (Graded, over HTTP), the
    stand-in model, NeMo Gym's simple agent over both (``ors_simple_agent``), and 0.7.0's
    single-agent-turn Environment Server over the agent and the resources server
    (``ors_episodes``), found by NeMo Gym's ``ServerClient`` through one global config."""
    config = OmegaConf.create({})
    client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=0),
                          global_config_dict=config)
    resources = resources_server(client, base_url=ors_url, env_name="graded")
    agent = SimpleAgent(
        config=SimpleAgentConfig(
            host="127.0.0.1", port=0, entrypoint="app.py", name="ors_simple_agent",
            max_steps=16,
            model_server=ModelServerRef(type="responses_api_models", name="policy_model"),
            resources_server=ResourcesServerRef(type="resources_servers", name="ors")),
        server_client=client)
    environment = SingleAgentTurnEnvironmentServer(
        config=SingleAgentTurnEnvironmentServerConfig(
            host="127.0.0.1", port=0, entrypoint="app.py", name="ors_episodes",
            cleanup_timeout_seconds=30, resources_tool_transports=["direct_http"],
            resources_server=ResourcesServerRef(type="resources_servers", name="ors"),
            agent_server=AgentServerRef(type="responses_api_agents", name="ors_simple_agent")),
        server_client=client)
    kinds = {"ors": "resources_servers", "policy_model": "responses_api_models",
             "ors_simple_agent": "responses_api_agents", "ors_episodes": "environment_servers"}
    apps = {"ors": resources.setup_webserver(), "policy_model": stand_in_model(),
            "ors_simple_agent": agent.setup_webserver(),
            "ors_episodes": environment.setup_webserver()}
    # NeMo Gym's launcher hands each server it starts the global config in this variable;
    # its HTTP client reads its settings there (here: the defaults).
    saved = os.environ.get("NEMO_GYM_CONFIG_DICT")
    os.environ["NEMO_GYM_CONFIG_DICT"] = "{}"
    try:
        with Servers(apps) as served:
            for name, url in served.urls.items():
                host, port = url.removeprefix("http://").split(":")
                config[name] = {kinds[name]: {name: {"host": host, "port": int(port)}}}
            yield served.urls
    finally:
        resources.close()
        if saved is None:
            os.environ.pop("NEMO_GYM_CONFIG_DICT", None)
        else:
            os.environ["NEMO_GYM_CONFIG_DICT"] = saved


def replay(ors_url: str, row: dict[str, Any], output: list[dict[str, Any]]) -> float:
    """The return an ``OrsEnv`` gives the rollout's actions (its calls, then its answer)."""
    with OrsEnv(base_url=ors_url, env_name="graded") as env:
        env.reset(options={"split": row["ors_split"], "index": row["ors_index"]})
        total = 0.0
        for item in output:
            if item["type"] == "function_call":
                action: Any = {"name": item["name"], "arguments": json.loads(item["arguments"])}
            elif item["type"] == "message":
                action = item["content"][0]["text"]
            else:
                continue
            _, reward, terminated, _, _ = env.step(action)
            total += float(reward)
        assert terminated
        return total


def test_simple_agent_rollouts_earn_the_environment_s_own_rewards(
    ors_url: str, stack: dict[str, str], tmp_path: Path,
) -> None:
    path = tmp_path / "rows.jsonl"
    assert main(["nemo-gym", "dataset", "--base-url", ors_url, "--env-name", "graded",
                 "--split", "train", "-o", str(path)]) == 0
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["ors_index"] for row in rows] == [0, 1, 2, 3]

    async def collect() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=stack["ors_simple_agent"], timeout=120) as client:
            async def run(row: dict[str, Any]) -> dict[str, Any]:
                reply = await client.post("/run", json=row)
                assert reply.status_code == 200, reply.text
                return dict(reply.json())

            return list(await asyncio.gather(*(run(row) for row in rows * 2)))

    results = asyncio.run(collect())
    assert [r["reward"] for r in results] == [1.0, 0.0, 1.0, 0.0] * 2  # even targets right
    for row, result in zip(rows * 2, results, strict=True):
        assert result["mask_sample"] is False and result["ors_finished"] is True
        assert result["reward"] == replay(ors_url, row, result["response"]["output"])
        assert result["reward_components"]["effort"] == 0.25 * (row["ors_index"] + 2)
    assert Graded.live == 0  # every rollout's ORS session was released


def test_an_environment_server_runs_typed_episodes_and_closes_them(
    ors_url: str, stack: dict[str, str],
) -> None:
    """0.7.0's single-agent-turn Environment Server: a typed seed, the agent's session granted
    direct HTTP access to the tools, verify, then close_session."""
    rows = dataset_rows(base_url=ors_url, env_name="graded")

    async def collect() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=stack["ors_episodes"], timeout=120) as client:
            async def run(i: int, row: dict[str, Any]) -> dict[str, Any]:
                request = {"episode_id": {"rollout_id": f"rollout-{i}"},
                           "task": {"task_id": {"taskset": "ors", "task_id": row["task_id"]},
                                    "task_input": row}}
                reply = await client.post("/run", json=request)
                assert reply.status_code == 200, reply.text
                return dict(reply.json())

            return list(await asyncio.gather(*(run(i, row) for i, row in enumerate(rows))))

    episodes = asyncio.run(collect())
    assert [e["failure"] for e in episodes] == [None] * 4
    assert [e["result"]["reward"] for e in episodes] == [1.0, 0.0, 1.0, 0.0]
    for row, episode in zip(rows, episodes, strict=True):
        output = episode["result"]["response"]["output"]
        assert episode["result"]["reward"] == replay(ors_url, row, output)
    assert Graded.live == 0  # each typed session closed by the Environment Server
