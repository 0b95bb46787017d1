"""Gym ids: bundled ids in-process, remote ids in their own namespace with the bundled casing."""

from __future__ import annotations

import logging
import subprocess
import sys

import gymnasium as gym
import pytest

import ors_gym
from ors_gym.envs import BUNDLED
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.registration import REMOTE_NAMESPACE, remote_id
from ors_gym.serving import ServerThread


def test_remote_ids_take_the_bundled_casing() -> None:
    assert remote_id("math") == "ors-remote/Math-v0"
    assert remote_id("GRIDWORLD") == "ors-remote/GridWorld-v0"
    assert remote_id("qa", "ors-gpu") == "ors-gpu/QA-v0"
    assert remote_id("probe") == "ors-remote/probe-v0"  # not bundled: the server's own name
    assert remote_id("my env-v2") == "ors-remote/my_env_v2-v0"


def test_register_server_ids_never_differ_from_in_process_ids_by_case(server_url: str) -> None:
    ids = ors_gym.register_server(server_url, max_episode_steps=7)
    served = [*BUNDLED, *TEST_ENVS]  # the test envs' casing: register_test_envs made them known
    assert sorted(ids) == sorted(f"{REMOTE_NAMESPACE}/{name}-v0" for name in served)
    ors_ids = [k for k in gym.registry if k.split("/")[0] in ("ors", REMOTE_NAMESPACE)]
    assert len({k.lower() for k in ors_ids}) == len(ors_ids)

    remote, local = gym.make("ors-remote/Math-v0"), gym.make("ors/Math-v0")
    try:
        assert remote.unwrapped.location.startswith("http://127.0.0.1")  # type: ignore[attr-defined]
        assert local.unwrapped.location == "in-process"  # type: ignore[attr-defined]
        assert remote.spec is not None and remote.spec.max_episode_steps == 7
        remote.reset(seed=0)
    finally:
        remote.close()
        local.close()


def test_a_second_server_replaces_ids_with_a_warning_or_keeps_its_own_namespace(
    server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ors_gym.register_server(server_url)
    with ServerThread([BUNDLED["Math"]]) as other:
        with caplog.at_level(logging.WARNING, logger="ors_gym"):
            assert ors_gym.register_server(other.url, namespace="ors-second") == [
                "ors-second/Math-v0"
            ]
        assert not caplog.records
        assert gym.spec("ors-remote/Math-v0").kwargs["base_url"] == server_url
        assert gym.spec("ors-second/Math-v0").kwargs["base_url"] == other.url

        with caplog.at_level(logging.WARNING, logger="ors_gym"):
            ors_gym.register_server(other.url)
        assert gym.spec("ors-remote/Math-v0").kwargs["base_url"] == other.url
        (record,) = caplog.records
        assert "ors-remote/Math-v0 now runs at" in record.getMessage()
    ors_gym.register_server(server_url)  # leave the ids as other tests expect them


@pytest.mark.parametrize("namespace", ["ors", "has/slash", "dotted.name", ""])
def test_register_server_rejects_bad_namespaces(server_url: str, namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace="):
        ors_gym.register_server(server_url, namespace=namespace)


def test_the_test_envs_are_registered_only_on_request() -> None:
    """``import ors_gym`` leaves Echo and Latency out; ``register_test_envs()`` adds both ids,
    hosted in-process with their step limits. In a fresh process: this one's conftest
    registered them already."""
    code = (
        "import gymnasium as gym, ors_gym\n"
        "assert not [k for k in gym.registry if k in ('ors/Echo-v0', 'ors/Latency-v0')]\n"
        "from ors_gym.envs.testing import register_test_envs\n"
        "print(register_test_envs())\n"
        "env = gym.make('ors/Latency-v0')\n"
        "obs, info = env.reset(seed=0, options={'task_spec': {'delay_ms': 0, 'length': 1}})\n"
        "print(env.spec.max_episode_steps, env.unwrapped.location, env.step(\n"
        "    {'tool_calls': [{'name': 'wait', 'arguments': {}}]})[2])\n"
        "env.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['ors/Echo-v0', 'ors/Latency-v0']", "1000 in-process True"]
