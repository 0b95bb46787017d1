"""ors_gym.ray on a local Ray cluster: RLlib PPO learns GridWorld, distributed rollouts, faults.

The cluster is started here (``ray.init(num_cpus=3)``) and stopped at the end;
the ORS servers are real SDK servers in threads (``ServerThread``). Nothing is
mocked; waits are on Ray events with bounded timeouts, never sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ors_gym.envs import BUNDLED  # noqa: E402
from ors_gym.scripted import ScriptedLLM  # noqa: E402
from ors_gym.serving import ServerThread  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """A local Ray cluster whose workers import this checkout's ors_gym (and these tests)."""
    parts = (str(ROOT), str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", ""))
    path = os.pathsep.join(p for p in parts if p)
    ray.init(
        num_cpus=3,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": path, "OPENREWARD_DISABLE_UPDATE_CHECK": "1"}},
    )
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def servers() -> Iterator[list[ServerThread]]:
    """Two real ORS servers, each hosting every bundled environment."""
    specs = list(BUNDLED.values())
    with ServerThread(specs) as first, ServerThread(specs) as second:
        yield [first, second]


def _sessions(server: ServerThread) -> set[str]:
    """The session ids open on a real SDK server (read from the server itself)."""
    return set(server.sdk_server._active_envs)


# -- the extra is optional -----------------------------------------------------------------------


def test_import_ors_gym_does_not_import_ray() -> None:
    code = (
        "import sys, ors_gym, ors_gym.train, ors_gym.wrappers, ors_gym.vector\n"
        "assert 'ray' not in sys.modules, 'import ors_gym imported ray'\n"
        "import ors_gym.ray\n"
        "assert 'ray' not in sys.modules, 'ors_gym.ray imports ray only when used'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_env_creator_builds_fixed_spaces_and_spreads_servers() -> None:
    import pickle

    import gymnasium as gym

    from ors_gym.ray import env_creator

    creator = pickle.loads(pickle.dumps(env_creator("ors/GridWorld-v0", max_episode_steps=7)))
    env = creator({})
    try:
        assert isinstance(env.action_space, gym.spaces.Discrete)
        assert env.observation_space.shape == (4,)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
    finally:
        env.close()
    spread = env_creator(base_url=["http://a", "http://b"])
    assert [spread._url(spread.base_url, 1) for _ in range(3)] == ["http://b", "http://a", "http://b"]
    with pytest.raises(TypeError, match="unknown env_config keys"):
        creator({"colour": "red"})
    with pytest.raises(ValueError, match="obs='pixels'"):
        env_creator(obs="pixels")


def test_env_creator_carries_a_run_time_id_to_the_workers(server_url: str) -> None:
    import pickle

    import gymnasium as gym

    import ors_gym
    from ors_gym.ray import env_creator

    ids = ors_gym.register_server(server_url, namespace="ors-raytest")
    assert "ors-raytest/GridWorld-v0" in ids
    creator = env_creator("ors-raytest/GridWorld-v0", max_episode_steps=5)
    shipped = pickle.dumps(creator)
    for env_id in ids:  # a worker process has none of them
        del gym.registry[env_id]
    env = pickle.loads(shipped)({})
    try:
        assert env.unwrapped.location == server_url
        env.reset(seed=0)
    finally:
        env.close()
    with pytest.raises(gym.error.Error):
        env_creator("ors-raytest/Nope-v0")


# -- RLlib ---------------------------------------------------------------------------------------


def _ppo(env: str, *, fragment: int = 128, seed: int | None = 0) -> Any:
    """PPO with 2 remote EnvRunners of 4 envs each; a batch is ``2 x 4 x fragment`` steps.

    ``seed=None`` leaves RLlib unseeded, which spares each process importing torch's
    compiler (RLlib's seeding turns on torch's deterministic algorithms, which loads it).
    """
    from ray.rllib.algorithms.ppo import PPOConfig

    batch = 2 * 4 * fragment
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4, rollout_fragment_length=fragment)
        .training(
            train_batch_size_per_learner=batch, minibatch_size=batch // 4, num_epochs=4,
            lr=1e-3, gamma=0.95, lambda_=0.95, entropy_coeff=0.01,
        )
        .rl_module(model_config={"fcnet_hiddens": [64, 64]})
        .debugging(seed=seed)
        .build_algo()
    )


def _beats(trained: dict[str, float], random: dict[str, float]) -> bool:
    """The learning criterion: more successes, more return and shorter episodes than random."""
    return (
        trained["success_rate"] >= random["success_rate"] + 0.4
        and trained["mean_return"] > random["mean_return"] + 0.3
        and trained["mean_length"] < random["mean_length"]
    )


def _greedy(module: Any) -> Any:
    import numpy as np
    import torch

    def act(obs: Any) -> int:
        batch = {"obs": torch.as_tensor(np.asarray(obs, dtype=np.float32)[None])}
        with torch.no_grad():
            logits = module.forward_inference(batch)["action_dist_inputs"]
        return int(torch.argmax(logits, dim=-1)[0])

    return act


@pytest.mark.slow
def test_rllib_ppo_learns_gridworld_with_remote_env_runners(cluster: None) -> None:
    from ors_gym.ray import rllib_env
    from ors_gym.train import _random_policy, evaluate, make_env

    algo = _ppo(rllib_env("ors/GridWorld-v0"))
    eval_env = make_env("ors/GridWorld-v0")
    try:
        runners = algo.env_runner_group
        assert runners.num_remote_env_runners() == 2
        random = evaluate(eval_env, _random_policy(eval_env, 0), 48)
        for iterations in range(1, 16):  # noqa: B007 - until the greedy policy clearly beats random
            result = algo.train()
            trained = evaluate(eval_env, _greedy(algo.get_module()), 48)
            if _beats(trained, random):
                break
        # Every iteration sampled a full batch on the remote runners.
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 1024 * iterations
    finally:
        eval_env.close()
        algo.stop()
    assert trained["success_rate"] >= random["success_rate"] + 0.4, (random, trained)
    assert trained["mean_return"] > random["mean_return"] + 0.3, (random, trained)
    assert trained["mean_length"] < random["mean_length"], (random, trained)


@pytest.mark.slow
def test_rllib_env_runners_over_http_spread_over_servers(
    cluster: None, servers: list[ServerThread]
) -> None:
    from ors_gym.ray import rllib_env

    urls = [s.url for s in servers]
    algo = _ppo(rllib_env("ors/GridWorld-v0", base_url=urls), fragment=32, seed=None)
    try:
        result = algo.train()
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 2 * 4 * 32
        # 2 runners x 4 envs: each has an episode (a session) open on one of the two servers.
        assert all(_sessions(s) for s in servers), [len(_sessions(s)) for s in servers]
        assert sum(len(_sessions(s)) for s in servers) == 8
    finally:
        algo.stop()
    assert not any(_sessions(s) for s in servers)  # the runners closed their envs


# -- distributed rollouts ------------------------------------------------------------------------


def _math_tasks(n: int) -> list[dict[str, Any]]:
    return [{"split": "train", "index": i % 20} for i in range(n)]


@pytest.mark.slow
def test_rollout_of_200_episodes_over_two_servers(
    cluster: None, servers: list[ServerThread]
) -> None:
    from ors_gym.ray import Progress, rollouts
    from ors_gym.trajectories import trajectory_messages

    urls = [s.url for s in servers]
    seen: list[dict[str, int]] = []

    def watch(progress: Progress) -> None:
        seen.append(dict(progress.sessions))

    llm = ScriptedLLM(format="openai", seed=0)
    with rollouts(
        llm.act, _math_tasks(200), servers=urls, env_id="ors/Math-v0", num_actors=2,
        max_sessions_per_actor=8, max_sessions_per_server=6, on_progress=watch,
    ) as run:
        records = list(run)
    assert run.progress.done == run.progress.finished == 200, run.progress
    assert sorted(r["rollout"]["task_index"] for r in records) == list(range(200))
    assert all(r["complete"] and r["terminated"] for r in records)
    assert all(r["total_reward"] == 1.0 for r in records)  # ScriptedLLM solves Math
    assert {r["rollout"]["server"] for r in records} == set(urls)
    assert {r["rollout"]["actor"] for r in records} == {0, 1}
    assert max(n for counts in seen for n in counts.values()) <= 6  # the per-server limit
    first = records[0]
    assert first["format"] == "ors_gym.trajectory/1" and first["env_id"] == "ors/Math-v0"
    assert first["steps"][0]["tool_calls"][0]["name"] == "submit"
    assert [m.role for m in trajectory_messages(first)][:2] == ["user", "assistant"]
    assert not any(_sessions(s) for s in servers)


def test_rollout_in_process_with_an_async_observation_policy(cluster: None) -> None:
    from ors_gym.ray import rollouts

    async def policy(observation: dict[str, Any], tools: list[dict[str, Any]]) -> Any:
        await asyncio.sleep(0)  # an async client would await its model here
        assert "text" in observation and tools[0]["type"] == "function"
        return {"tool_calls": [{"name": "move", "arguments": {"direction": "up"}}]}

    with rollouts(
        policy, range(6), env_id="ors/GridWorld-v0", inputs="observation", num_actors=1,
        max_steps=3, seed=7,
    ) as run:
        records = list(run)
    assert len(records) == 6 and all(r["complete"] for r in records)
    assert all(r["length"] <= 3 and r["server"] == "in-process" for r in records)
    assert [r["seed"] for r in sorted(records, key=lambda r: r["rollout"]["task_index"])] == [
        7, 8, 9, 10, 11, 12
    ]


# -- faults --------------------------------------------------------------------------------------


@ray.remote
class _Gate:
    """Holds back the episodes of one process (the actor to be killed) until it dies."""

    def __init__(self) -> None:
        self.blocked: set[int] = set()
        self.never = asyncio.Event()

    def block(self, pid: int) -> None:
        self.blocked.add(pid)

    async def wait(self, pid: int) -> None:
        if pid in self.blocked:
            await self.never.wait()


class _GatedPolicy:
    """ScriptedLLM, except that the blocked actor's episodes stall before their first action."""

    def __init__(self, gate: Any) -> None:
        self.gate = gate
        self.llm = ScriptedLLM(format="openai", seed=0)

    async def __call__(self, messages: list[Any], tools: list[dict[str, Any]]) -> Any:
        await self.gate.wait.remote(os.getpid())
        return self.llm.act(messages, tools)


def _victim_sessions(run: Any, actor: int) -> int:
    return sum(1 for e in run.in_flight() if e["actor"] == actor and e["session_id"])


@pytest.mark.slow
@pytest.mark.parametrize("retries", [0, 1])
def test_killed_actor_loses_only_its_episodes_and_their_sessions(
    cluster: None, servers: list[ServerThread], retries: int
) -> None:
    from ors_gym.ray import Progress, rollouts

    gate = _Gate.remote()
    urls = [s.url for s in servers]
    killed: list[set[str]] = []
    run = rollouts(
        _GatedPolicy(gate), _math_tasks(40), servers=urls, env_name="math", num_actors=2,
        max_sessions_per_actor=4, retries=retries,
        on_progress=lambda progress: kill_when_full(progress),
    )
    victim = run.actors[0]
    ray.get(gate.block.remote(ray.get(victim.pid.remote(), timeout=60)), timeout=60)

    def kill_when_full(progress: Progress) -> None:
        # Every slot of the victim holds an open session, stalled: no session is being
        # opened there, so the driver knows all of them when the actor dies.
        if not killed and _victim_sessions(run, 0) == 4:
            killed.append({sid for _, sid in run.open_sessions()})
            ray.kill(victim)

    with run:
        records = list(run)
    ray.kill(gate)
    assert killed, "the victim never had its 4 sessions open"
    assert sorted(r["rollout"]["task_index"] for r in records) == list(range(40))
    lost = [r for r in records if not r["complete"]]
    if retries:
        assert not lost and run.progress.retried == 4
        assert {r["rollout"]["actor"] for r in records if r["rollout"]["attempt"] == 2} == {1}
    else:
        assert len(lost) == 4 and run.progress.failed == 4, run.progress
        assert all(r["ended_by"] == "actor_died" and r["rollout"]["actor"] == 0 for r in lost)
        assert {r["rollout"]["session_id"] for r in lost} <= killed[0]
        assert "died" in lost[0]["error"]
        assert all(r["rollout"]["actor"] == 1 for r in records if r["complete"])
    assert run.progress.live_actors == 1
    assert not any(_sessions(s) for s in servers), "a dead actor's session was left open"


def _stall_everything(run: Any, gate: Any) -> None:
    for actor in run.actors:
        ray.get(gate.block.remote(ray.get(actor.pid.remote(), timeout=60)), timeout=60)


@pytest.mark.slow
def test_ctrl_c_deletes_every_session(cluster: None, servers: list[ServerThread]) -> None:
    from ors_gym.ray import Progress, rollouts

    gate = _Gate.remote()
    interrupted: list[int] = []

    def interrupt_when_full(progress: Progress) -> None:
        if sum(progress.sessions.values()) == 8:
            interrupted.append(sum(len(_sessions(s)) for s in servers))
            raise KeyboardInterrupt

    run = rollouts(
        _GatedPolicy(gate), _math_tasks(20), servers=[s.url for s in servers], env_name="math",
        num_actors=2, max_sessions_per_actor=4, on_progress=interrupt_when_full,
    )
    _stall_everything(run, gate)
    with pytest.raises(KeyboardInterrupt):
        list(run)
    ray.kill(gate)
    assert interrupted == [8]  # 8 sessions were open on the servers when Ctrl-C came
    assert not any(_sessions(s) for s in servers)


# -- the README's example, and what a user gets wrong --------------------------------------------


def test_readme_rollout_example_against_a_served_gridworld(
    cluster: None, servers: list[ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    """As the Ray guide writes it (one actor running up to 16 sessions at once, episodes of at
    most 3 steps), on a served GridWorld (64 tasks in its train split): 200 indices are
    refused before any actor starts; 64 run, and a failing episode is logged, counted, and
    recorded in the same shape as the others."""
    from ors_gym.ray import rollouts

    calls = [0]  # travels with the policy to its one actor, whose episodes share one loop

    async def policy(messages: Any, tools: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:  # the first episode's first call
            raise RuntimeError("the model went away")
        return {"tool_calls": [{"name": "move", "arguments": {"direction": "down"}}]}

    urls = [servers[0].url]
    with pytest.raises(ValueError, match=r"index 64 of split 'train', which has 64 tasks"):
        rollouts(policy, tasks=range(200), env_id="ors/GridWorld-v0", num_actors=2,
                 servers=urls, max_sessions_per_actor=16, max_sessions_per_server=32)
    with caplog.at_level(logging.WARNING, logger="ors_gym"), rollouts(
        policy, tasks=range(64), env_id="ors/GridWorld-v0", num_actors=1, servers=urls,
        max_sessions_per_actor=16, max_sessions_per_server=32, max_steps=3,
    ) as run:
        records = list(run)
    assert run.progress.done == 64 and run.progress.failed == 1, run.progress
    assert sorted(r["index"] for r in records) == list(range(64))
    assert all(r["length"] <= 3 for r in records)
    (failed,) = [r for r in records if not r["complete"]]
    shape = {frozenset(r) for r in records}
    assert len(shape) == 1, [sorted(k) for k in shape]  # one shape, failed records too
    assert failed["ended_by"] == "error" and "the model went away" in failed["error"]
    assert any("failed" in r.getMessage() and "the model went away" in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)


# -- last: Ray shut down mid-run (it stops the cluster) --------------------------------------------


@pytest.mark.slow
def test_ray_shutdown_mid_run_deletes_every_session(
    cluster: None, servers: list[ServerThread]
) -> None:
    """Last in this file: it stops the cluster. The driver deletes the sessions it knows."""
    from ors_gym.ray import Progress, rollouts

    gate = _Gate.remote()
    open_at_shutdown: list[int] = []

    def shut_down_when_full(progress: Progress) -> None:
        if not open_at_shutdown and sum(progress.sessions.values()) == 8:
            open_at_shutdown.append(sum(len(_sessions(s)) for s in servers))
            ray.shutdown()  # kills the actors, which run no cleanup of their own

    run = rollouts(
        _GatedPolicy(gate), _math_tasks(20), servers=[s.url for s in servers], env_name="math",
        num_actors=2, max_sessions_per_actor=4, on_progress=shut_down_when_full,
    )
    _stall_everything(run, gate)
    with pytest.raises(RuntimeError, match="Ray was shut down during the rollout"):
        list(run)
    assert open_at_shutdown == [8]
    assert not any(_sessions(s) for s in servers)
