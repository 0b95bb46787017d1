"""How :mod:`ors_gym.train` measures a policy: the same held-out tasks for every policy.

``evaluate`` plays episode ``i`` on task ``i mod num_tasks`` of the ``test``
split (else the training split), so the random policy, the untrained and the
trained model face the same tasks. Public through :mod:`ors_gym.train`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["Policy", "eval_split", "evaluate", "model_policy", "random_policy"]

#: A policy for ``evaluate``: observation in, action index out.
Policy = Callable[[Any], int]


def eval_split(env: gym.Env[Any, Any]) -> str:
    """The split ``evaluate`` plays by default: ``test`` if the environment has it."""
    ors = env.unwrapped
    names = [s.name for s in ors.backend.splits(ors.env_name)]  # type: ignore[attr-defined]
    return "test" if "test" in names else ors.default_split()  # type: ignore[attr-defined]


def evaluate(
    env: gym.Env[Any, Any], policy: Policy, episodes: int, *, split: str | None = None
) -> dict[str, float]:
    """Run ``policy`` for ``episodes`` episodes; success rate, mean return, mean length.

    Episode ``i`` plays task ``i mod num_tasks`` of ``split`` (default: ``test``
    if the environment has it), so policies evaluated with the same ``episodes``
    face the same tasks. Success: the environment ended the episode
    (``terminated``) with a positive final reward.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    split = split or eval_split(env)
    n_tasks = env.unwrapped.num_tasks(split)  # type: ignore[attr-defined]
    successes, returns, lengths = 0, [], []
    for episode in range(episodes):
        obs, _ = env.reset(options={"split": split, "index": episode % n_tasks})
        total, length, done = 0.0, 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += float(reward)
            length += 1
            done = terminated or truncated
        successes += int(terminated and float(reward) > 0)
        returns.append(total)
        lengths.append(length)
    return {
        "success_rate": successes / episodes,
        "mean_return": float(np.mean(returns)),
        "mean_length": float(np.mean(lengths)),
        "episodes": float(episodes),
    }


def random_policy(env: gym.Env[Any, Any], seed: int) -> Policy:
    """Uniformly random actions from ``env``'s action space, seeded."""
    space = env.action_space
    space.seed(seed)
    return lambda obs: int(space.sample())


def model_policy(model: Any) -> Policy:
    """An SB3 model's deterministic actions."""

    def act(obs: Any) -> int:
        action, _ = model.predict(obs, deterministic=True)
        return int(action)

    return act
