"""Rollouts by NeMo Gym's own agent (``simple_agent``) over rows from ``ors-gym nemo-gym
dataset``, against a stand-in model server: the rewards NeMo Gym records are the ones an
``OrsEnv`` replay of the same actions gives, and no ORS session is left open.

The three servers run as NeMo Gym runs them, each its own app under uvicorn on 127.0.0.1,
found through one global config by NeMo Gym's ``ServerClient``: the ORS resources server,
the agent (whose ``/run`` seeds, asks the model, calls the tools and verifies), and the
model. The model is the one stand-in: no language model runs here, so a scripted policy
answers each Responses request (``add`` until the target, then an answer, right for even
targets and wrong for odd ones). NeMo Gym's collection command (``gym eval run``) needs
mlflow, whose exporter needs Python 3.12: the agent's ``/run`` is driven directly instead.

Needs nemo-gym, which has a venv of its own: ``bash scripts/nemo-gym-venv.sh --test``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "responses_api_agents.simple_agent.app",
    reason="nemo-gym has a venv of its own: bash scripts/nemo-gym-venv.sh --test",
)

import httpx
from _envs import Graded
from fastapi import FastAPI
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf
from responses_api_agents.simple_agent.app import (
    ModelServerRef,
    ResourcesServerRef,
    SimpleAgent,
    SimpleAgentConfig,
)

from ors_gym import OrsEnv
from ors_gym._uvicorn import UvicornThread
from ors_gym.cli import main

MakeServer = Callable[..., Any]


def stand_in_model() -> FastAPI:
    """A Responses endpoint whose scripted policy reads the target from the prompt."""
    app = FastAPI()
    counter = iter(range(1_000_000))

    @app.post("/v1/responses")
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


@pytest.fixture
def agent_url(ors_url: str, make_server: MakeServer,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """NeMo Gym's simple agent, over the ORS resources server (Graded) and the stand-in."""
    # NeMo Gym's launcher hands each server it starts the global config in this variable;
    # its HTTP client reads its settings there (here: the defaults).
    monkeypatch.setenv("NEMO_GYM_CONFIG_DICT", "{}")
    config = OmegaConf.create({})
    client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=0),
                          global_config_dict=config)
    resources = make_server(base_url=ors_url, env_name="graded").setup_webserver()
    agent = SimpleAgent(
        config=SimpleAgentConfig(
            host="127.0.0.1", port=0, entrypoint="app.py", name="ors_simple_agent",
            max_steps=16,
            model_server=ModelServerRef(type="responses_api_models", name="policy_model"),
            resources_server=ResourcesServerRef(type="resources_servers", name="ors")),
        server_client=client)
    with UvicornThread(resources, name="ors", what="resources server") as ors, \
            UvicornThread(stand_in_model(), name="model", what="model server") as model, \
            UvicornThread(agent.setup_webserver(), name="agent", what="agent") as served:
        for name, kind, url in (("ors", "resources_servers", ors.url),
                                ("policy_model", "responses_api_models", model.url),
                                ("ors_simple_agent", "responses_api_agents", served.url)):
            host, port = url.removeprefix("http://").split(":")
            config[name] = {kind: {name: {"host": host, "port": int(port)}}}
        yield served.url


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
    ors_url: str, agent_url: str, tmp_path: Path,
) -> None:
    path = tmp_path / "rows.jsonl"
    assert main(["nemo-gym", "dataset", "--base-url", ors_url, "--env-name", "graded",
                 "--split", "train", "-o", str(path)]) == 0
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["ors_index"] for row in rows] == [0, 1, 2, 3]

    async def collect() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=agent_url, timeout=120) as client:
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
