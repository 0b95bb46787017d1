"""Picklable env constructors for gymnasium's own ``SyncVectorEnv`` / ``AsyncVectorEnv``.

``make_env_fns`` gives N constructors of an ors id; they carry the resolved
``EnvSpec``, so spawned workers (whose registry is empty until something
imports ors_gym) can build the env, ids registered at run time included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from ors_gym.secret import redact_kwargs

__all__ = ["EnvFn", "check_num_envs", "make_env_fns"]

Wrapper = Callable[[gym.Env[Any, Any]], gym.Env[Any, Any]]


class EnvFn:
    """A picklable ``() -> gym.Env`` making one sub-env of ``env_id`` with ``kwargs``.

    The id is resolved to its ``EnvSpec`` here, so a spawned ``AsyncVectorEnv``
    worker (whose gym registry is empty until something imports ors_gym) can
    build the env: unpickling this object imports ``ors_gym``, and the spec is
    carried along, so ids registered at run time (``register_server``) work too.
    ``wrappers`` are applied in order (classes, or picklable partials of them).
    """

    def __init__(
        self, env_id: str | EnvSpec, *, wrappers: Sequence[Wrapper] = (), **kwargs: Any
    ) -> None:
        self.spec = env_id if isinstance(env_id, EnvSpec) else gym.spec(env_id)
        self.wrappers = tuple(wrappers)
        self.kwargs = kwargs

    def __call__(self) -> gym.Env[Any, Any]:
        env = gym.make(self.spec, **self.kwargs)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env

    def __repr__(self) -> str:
        return f"EnvFn({self.spec.id!r}, **{redact_kwargs(self.kwargs)!r})"


def make_env_fns(
    env_id: str | EnvSpec, num_envs: int, *, wrappers: Sequence[Wrapper] = (), **kwargs: Any
) -> list[EnvFn]:
    """``num_envs`` constructors of ``env_id`` for ``SyncVectorEnv`` / ``AsyncVectorEnv``.

    Sessions open lazily in each sub-env (at its first ``reset``), so the
    constructors travel to ``fork`` and ``spawn`` workers alike.

    ``AsyncVectorEnv``'s ``shared_memory`` (on by default) needs fixed-size
    observations: an ``OrsEnv``'s (text, and a tuple of images of any number)
    cannot live in a shared buffer, and gymnasium refuses them with "disable
    ``shared_memory``". So pass ``shared_memory=False``, or ``wrappers`` that
    make the observation a ``Box`` (``ors_gym.wrappers.TextVector``,
    ``ImageObservation``, ``MetadataVector``), which shared memory takes.
    """
    check_num_envs(num_envs)
    return [EnvFn(env_id, wrappers=wrappers, **kwargs) for _ in range(num_envs)]


def check_num_envs(num_envs: Any) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    return int(num_envs)
