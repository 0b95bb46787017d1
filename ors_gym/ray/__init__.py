"""Ray for ORS environments: RLlib training and distributed LLM-agent rollouts.

Needs ``pip install "ors-gym[ray]"``; ``import ors_gym`` never imports this.

- :func:`rllib_env` / :func:`env_creator`: an ``ors_gym`` id as an RLlib
  environment, built in each remote EnvRunner (:mod:`ors_gym.ray.rllib`).
- :func:`rollouts` / :class:`Rollouts`: many episodes of a user policy over a
  pool of Ray actors, trajectories streamed back as they finish
  (:mod:`ors_gym.ray.rollouts`).
"""

from __future__ import annotations

from ors_gym.ray.rllib import OrsEnvCreator, env_creator, rllib_env
from ors_gym.ray.rollouts import Progress, Rollouts, rollouts

__all__ = ["OrsEnvCreator", "Progress", "Rollouts", "env_creator", "rllib_env", "rollouts"]
