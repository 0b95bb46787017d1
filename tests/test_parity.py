"""Replay: the same seeded random actions give the same episodes over HTTP and in-process."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ors_gym.env import OrsEnv
from ors_gym.envs import BUNDLED

# Sandbox is left out because its bash tool runs real shell commands on this machine: the suite must
# never run random strings as commands (tests/envs/test_sandbox_env.py covers it with scripts).
REPLAYED = sorted(set(BUNDLED) - {"Sandbox"})


def _same_observation(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["text"] == b["text"]
    assert len(a["images"]) == len(b["images"])
    for x, y in zip(a["images"], b["images"], strict=True):
        assert x.shape == y.shape and np.array_equal(x, y)


@pytest.mark.parametrize("name", REPLAYED)
def test_random_replay_is_identical_over_http_and_in_process(server_url: str, name: str) -> None:
    remote = OrsEnv(base_url=server_url, env_name=name.lower(), max_steps=12)
    local = OrsEnv(env_class=BUNDLED[name], max_steps=12)
    try:
        steps = 0
        for episode in range(4):
            seed = 100 + episode
            (obs_r, info_r), (obs_l, info_l) = remote.reset(seed=seed), local.reset(seed=seed)
            _same_observation(obs_r, obs_l)
            assert info_r["task_spec"] == info_l["task_spec"]
            assert info_r["tools"] == info_l["tools"]
            remote.action_space.seed(seed)
            local.action_space.seed(seed)
            while True:
                action = remote.action_space.sample()
                assert action == local.action_space.sample()
                out_r, out_l = remote.step(action), local.step(action)
                steps += 1
                _same_observation(out_r[0], out_l[0])
                assert out_r[1:4] == out_l[1:4]  # reward, terminated, truncated
                assert out_r[4]["calls"] == out_l[4]["calls"]
                assert out_r[4].get("error_reason") == out_l[4].get("error_reason")
                if out_r[2] or out_r[3]:
                    break
        assert steps >= 4
    finally:
        remote.close()
        local.close()
