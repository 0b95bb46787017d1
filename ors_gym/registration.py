"""Gymnasium ids: ``ors/<Name>-v0`` for bundled and remote environments.

``import ors_gym`` registers the bundled environments (hosted in-process by
default; pass ``base_url=`` to ``gym.make`` to use a server instead) and the
generic ``ors/Remote-v0``. ``register_server(url)`` adds one id per
environment a running server lists.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from ors_gym._secret import Secret

__all__ = ["BUNDLED_MAX_STEPS", "gym_name", "register_bundled", "register_server"]

NAMESPACE = "ors"
ENTRY_POINT = "ors_gym.env:OrsEnv"
VECTOR_ENTRY_POINT = "ors_gym.vector:OrsVectorEnv"

#: Episode step limits of the bundled environments (``TimeLimit`` truncates there).
BUNDLED_MAX_STEPS: dict[str, int] = {
    "GridWorld": 50,
    "Math": 4,
    "QA": 6,
    "Counter": 32,
    "Toolbox": 16,
    "Echo": 64,
    "Latency": 1000,
    "Judged": 4,
}
REMOTE_MAX_STEPS = 100


def gym_name(name: str) -> str:
    """``name`` made valid for a Gymnasium id (letters, digits, ``_ . -``)."""
    cleaned = re.sub(r"[^\w.-]", "_", name).strip("-")
    cleaned = re.sub(r"-v(\d+)$", r"_v\1", cleaned)  # a trailing -vN would read as a version
    return cleaned or "env"


def _register(env_id: str, max_steps: int, kwargs: dict[str, Any]) -> None:
    if env_id in gym.registry:
        del gym.registry[env_id]
    gym.register(
        id=env_id,
        entry_point=ENTRY_POINT,
        vector_entry_point=_vector_entry_point(),
        max_episode_steps=max_steps,
        kwargs={"max_steps": max_steps, **kwargs},
        disable_env_checker=True,
    )


def _vector_entry_point() -> str | None:
    import importlib.util

    return VECTOR_ENTRY_POINT if importlib.util.find_spec("ors_gym.vector") else None


def register_bundled() -> list[str]:
    """Register ``ors/<Name>-v0`` for each bundled environment; returns the ids."""
    from ors_gym.envs import BUNDLED

    ids = []
    for name, spec in BUNDLED.items():
        env_id = f"{NAMESPACE}/{name}-v0"
        _register(env_id, BUNDLED_MAX_STEPS.get(name, REMOTE_MAX_STEPS), {"env_class": spec})
        ids.append(env_id)
    if f"{NAMESPACE}/Remote-v0" not in gym.registry:
        gym.register(
            id=f"{NAMESPACE}/Remote-v0",
            entry_point=ENTRY_POINT,
            vector_entry_point=_vector_entry_point(),
            max_episode_steps=REMOTE_MAX_STEPS,
            kwargs={"max_steps": REMOTE_MAX_STEPS},
            disable_env_checker=True,
        )
    return ids


def register_server(
    base_url: str,
    *,
    api_key: str | None = None,
    max_episode_steps: int = REMOTE_MAX_STEPS,
    **env_kwargs: Any,
) -> list[str]:
    """Register ``ors/<name>-v0`` for each environment the server at ``base_url`` lists.

    ``<name>`` is the server's name made valid for Gymnasium's id syntax. Returns
    the registered ids; ``gym.make(id)`` then talks to that server.
    """
    from ors_gym.backends.http import HttpBackend

    backend = HttpBackend(base_url, api_key=api_key)
    try:
        names = backend.list_environments()
    finally:
        backend.close()
    ids = []
    for name in names:
        env_id = f"{NAMESPACE}/{gym_name(name)}-v0"
        kwargs: dict[str, Any] = {"base_url": base_url, "env_name": name, **env_kwargs}
        if api_key is not None:
            kwargs["api_key"] = Secret(api_key)
        _register(env_id, max_episode_steps, kwargs)
        ids.append(env_id)
    return ids
