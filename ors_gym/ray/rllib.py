"""ORS environments as RLlib environments (the current API stack, remote EnvRunners).

RLlib builds its environments inside its EnvRunner actors, in other
processes, from a *creator* it was given by name (``ray.tune.register_env``)
or as a callable. :func:`rllib_env` registers one for an ``ors_gym`` id and
returns the name to put in ``PPOConfig().environment(...)``::

    from ray.rllib.algorithms.ppo import PPOConfig
    from ors_gym.ray import rllib_env

    config = (
        PPOConfig()
        .environment(rllib_env("ors/GridWorld-v0"))          # in-process GridWorld
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4)
    )
    algo = config.build_algo()
    algo.train()

The creator is :class:`OrsEnvCreator`, a plain picklable object of this
module: unpickling it in a worker imports ``ors_gym``, which registers the
``ors/...`` ids there, so nothing has to be set up on the workers by hand.
It builds the environment with :func:`ors_gym.train.make_env`: the tool calls
become a ``Discrete`` action space (``DiscreteToolActions``) and the
observation a fixed array (``obs="vector" | "image" | "text"``), which is what
RLlib's default models need. ``base_url`` runs it over HTTP instead of in
process; a list of URLs spreads the EnvRunners' environments over several
servers (environment ``k`` of the run uses URL ``k mod len(urls)``).
``env_config`` given to ``.environment(...)`` overrides the creator's own
keyword arguments per run. An id registered at run time in the driver (by
:func:`ors_gym.register_server`, say ``ors-remote/Math-v0``) travels with
the creator and is registered in each worker too.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from ors_gym.ray._require import require
from ors_gym.registration import NAMESPACE
from ors_gym.train import DEFAULT_MAX_EPISODE_STEPS, OBSERVATIONS, make_env

__all__ = ["OrsEnvCreator", "env_creator", "rllib_env"]

#: The keyword arguments an ``env_config`` may override.
_OPTIONS = ("env_id", "obs", "base_url", "max_episode_steps")


@dataclass(frozen=True)
class OrsEnvCreator:
    """Builds the ORS environment ``env_id`` for RLlib: ``creator(env_config) -> gym.Env``.

    ``env_config`` is RLlib's ``EnvContext`` (a dict, with ``worker_index``
    and ``vector_index`` attributes) or any mapping; its keys among
    ``env_id``, ``obs``, ``base_url`` and ``max_episode_steps`` override this
    creator's. Picklable, and importing it registers ``ors_gym``'s ids.
    """

    env_id: str = "ors/GridWorld-v0"
    obs: str = "vector"
    base_url: str | tuple[str, ...] | None = None
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS
    spec: EnvSpec | None = None
    _made: itertools.count[int] = field(
        default_factory=itertools.count, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.obs not in OBSERVATIONS:
            raise ValueError(f"obs={self.obs!r}; choose one of {list(OBSERVATIONS)}")
        if isinstance(self.base_url, list):
            object.__setattr__(self, "base_url", tuple(self.base_url))

    def __call__(self, env_config: Mapping[str, Any] | None = None) -> gym.Env[Any, Any]:
        config = dict(env_config or {})
        unknown = sorted(set(config) - set(_OPTIONS) - {"num_envs"})
        if unknown:
            raise TypeError(f"unknown env_config keys {unknown}; ORS envs take {list(_OPTIONS)}")
        if self.spec is not None and self.spec.id not in gym.registry:
            gym.registry[self.spec.id] = self.spec  # registered at run time in the driver
        options = {name: config.get(name, getattr(self, name)) for name in _OPTIONS}
        worker = int(getattr(env_config, "worker_index", 0) or 0)
        return make_env(
            options["env_id"],
            obs=options["obs"],
            base_url=self._url(options["base_url"], worker),
            max_episode_steps=int(options["max_episode_steps"]),
        )

    def _url(self, base_url: str | Sequence[str] | None, worker: int) -> str | None:
        """The server for the next env built here: a list is spread over workers and envs."""
        if base_url is None or isinstance(base_url, str):
            return base_url
        urls = list(base_url)
        if not urls:
            raise ValueError("base_url is an empty list; give at least one server URL")
        return urls[(worker + next(self._made)) % len(urls)]

    def __reduce__(self) -> tuple[Any, ...]:
        # A fresh counter in each process (itertools.count pickles its position).
        fields = (self.env_id, self.obs, self.base_url, self.max_episode_steps, self.spec)
        return (OrsEnvCreator, fields)


def env_creator(
    env_id: str = "ors/GridWorld-v0",
    *,
    obs: str = "vector",
    base_url: str | Sequence[str] | None = None,
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS,
) -> OrsEnvCreator:
    """The RLlib env creator for ``env_id`` (usable as ``.environment(env=creator)``).

    ``env_id`` is looked up here: an id outside the ``ors/`` namespace (which
    ``import ors_gym`` registers everywhere) is carried to the workers.
    """
    import ors_gym  # noqa: F401 - registers the ors/... ids

    urls = base_url if base_url is None or isinstance(base_url, str) else tuple(base_url)
    spec = None
    if not env_id.startswith(f"{NAMESPACE}/"):
        spec = gym.spec(env_id)  # raises for an unknown id, here rather than in a worker
    return OrsEnvCreator(env_id, obs, urls, max_episode_steps, spec)


def rllib_env(
    env_id: str = "ors/GridWorld-v0",
    *,
    obs: str = "vector",
    base_url: str | Sequence[str] | None = None,
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS,
    name: str | None = None,
) -> str:
    """Register ``env_id`` with ``ray.tune.register_env``; returns the name to train on.

    ``name`` defaults to ``env_id`` itself (``"ors/GridWorld-v0"``), suffixed
    with the transport when ``base_url`` is given (``"ors/GridWorld-v0@http"``),
    so one driver can register both. Call it after ``ray.init()`` or before
    (the registration travels with the Ray job). The other arguments are
    :func:`ors_gym.train.make_env`'s; see :class:`OrsEnvCreator`.
    """
    register_env = require("ray.tune.registry").register_env
    creator = env_creator(
        env_id, obs=obs, base_url=base_url, max_episode_steps=max_episode_steps
    )
    if name is None:
        name = env_id if base_url is None else f"{env_id}@http"
    register_env(name, creator)
    return name
