"""Harness episodes as Ray tasks on a local cluster: each task runs its own runner and MCP
endpoint on its worker, its model the test's gateway reached through the session API
(``GatewayClient``); the episodes come back apart, with their returns, and nothing stays
open on the gateway."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ors_gym.harness import GatewayClient, Harness, ray_batch  # noqa: E402
from tests.harness._agents import chat_agent, counter_env  # noqa: E402
from tests.harness._model import counter_player  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """A local Ray cluster whose workers import this checkout (and these tests)."""
    parts = (str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", ""))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in parts if p),
                                       "OPENREWARD_DISABLE_UPDATE_CHECK": "1"}})
    try:
        yield
    finally:
        ray.shutdown()


def test_episodes_run_as_ray_tasks(cluster: None, gateway: Any, script: Any, tok: Any) -> None:
    script.use(counter_player(tok))
    targets = [2, 5, 9, 4]
    seen: list[int] = []
    episodes = ray_batch(Harness("chat", call=chat_agent), counter_env, len(targets),
                         gateway_url=gateway.url, model="tiny",
                         options=lambda i: {"task_spec": {"target": targets[i]}},
                         deadline=120, progress=lambda done, n, ep: seen.append(done))
    assert sorted(seen) == [1, 2, 3, 4]
    for target, episode in zip(targets, episodes, strict=True):
        assert episode.stop == "finished" and episode.reward == 1.0, episode.error
        assert sum(c["input"].get("amount", 0) for c in episode.calls) == target
        assert f"Make it equal {target} " in episode.trajectory.messages[0]["content"]
        assert sum(episode.trajectory.rows[0].mask) > 0
    assert gateway.sessions == []


def test_a_task_that_cannot_run_is_a_failed_episode(cluster: None, gateway: Any) -> None:
    def broken(i: int) -> Any:
        raise RuntimeError(f"no environment for episode {i}")

    (episode,) = ray_batch(Harness("chat", call=chat_agent), broken, 1,
                           gateway_url=gateway.url, model="tiny")
    assert episode.stop == "harness_failed" and "no environment for episode 0" in (
        episode.error or "")
    assert gateway.sessions == []


def test_the_client_speaks_the_session_api(gateway: Any) -> None:
    client = GatewayClient(gateway.url, model="tiny")
    info = client.open_session()
    assert info.id in gateway.sessions and client.sessions == [info.id]
    assert "sk-" not in repr(client) and info.api_key not in repr(info)
    traj = client.close_session(info.id, [0.5], stop_reason="timeout")
    assert traj.reward == 0.5 and traj.stop_reason == "timeout"
    assert client.trajectory(info.id).stop_reason == "timeout"
    client.drop_session(info.id)
    assert gateway.sessions == [] and client.sessions == []
    with pytest.raises(RuntimeError, match="refused GET"):
        client.trajectory(info.id)
    client.close()
