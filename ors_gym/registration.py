"""Gymnasium ids for ORS environments, and where each runs.

The scheme:

- ``ors/<Class>-v0``: a bundled environment, hosted in this process
  (``import ors_gym`` registers them; ``gym.make(id, base_url=...)`` uses a
  server instead).
- ``ors/<Class>-v0`` too for your own SDK environment class, added by
  :func:`register_class` (hosted in this process, like a bundled one), and for
  the environments for testing clients (``ors/Echo-v0``, ``ors/Latency-v0``),
  added by ``ors_gym.envs.testing.register_test_envs``.
- ``ors/Remote-v0``: any environment of any server, chosen at ``gym.make``
  with ``base_url=`` and ``env_name=``.
- ``ors-remote/<Name>-v0`` (another ``namespace=`` if you like): one id per
  environment a running server lists, added by :func:`register_server`. The
  namespace says "over HTTP".

``<Class>`` and ``<Name>`` follow one rule: the class name as written. A server
lists its environments by lower-cased class name, so a remote id takes the
casing of a class this process knows by that name (bundled, or given to
:func:`register_class`: ``math`` -> ``ors-remote/Math-v0``); for a class this
process has never seen, the server's name is all there is
(``colorquiz`` -> ``ors-remote/colorquiz-v0``; call ``register_class`` on the
class first, or pass your own ids to ``gym.register``, to get its casing). A
remote id thus never differs from an in-process one by case alone.
``ors-gym list`` shows every id with where it runs.
- ``openreward/<Namespace>.<name>-v0`` (``...<name>.<variant>-v0`` with a
  variant): a hosted OpenReward deployment ``Namespace/name``, added by
  :func:`register_hosted`. ``gym.make("ors/Remote-v0", deployment="Namespace/name")``
  reaches one without registering.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from ors_gym.errors import redact_url
from ors_gym.secret import Secret, redact_kwargs

__all__ = [
    "BUNDLED_MAX_STEPS",
    "HOSTED_NAMESPACE",
    "NAMESPACE",
    "REMOTE_NAMESPACE",
    "async_env_arguments",
    "gym_name",
    "hosted_id",
    "register_bundled",
    "register_class",
    "register_hosted",
    "register_server",
    "remote_id",
    "task_count",
]

logger = logging.getLogger("ors_gym")

NAMESPACE = "ors"
REMOTE_NAMESPACE = "ors-remote"
HOSTED_NAMESPACE = "openreward"
ENTRY_POINT = "ors_gym.env:OrsEnv"
VECTOR_ENTRY_POINT = "ors_gym.vector:OrsVectorEnv"

#: Episode step limits of the bundled environments (``TimeLimit`` truncates there).
BUNDLED_MAX_STEPS: dict[str, int] = {
    "GridWorld": 50,
    "Math": 4,
    "QA": 6,
    "Counter": 32,
    "Toolbox": 16,
    "Judged": 4,
    "Sandbox": 20,
}
REMOTE_MAX_STEPS = 100


def gym_name(name: str) -> str:
    """``name`` made valid for a Gymnasium id (letters, digits, ``_ . -``)."""
    cleaned = re.sub(r"[^\w.-]", "_", name).strip("-")
    cleaned = re.sub(r"-v(\d+)$", r"_v\1", cleaned)  # a trailing -vN would read as a version
    return cleaned or "env"


def remote_id(name: str, namespace: str = REMOTE_NAMESPACE) -> str:
    """The id :func:`register_server` gives a server's environment ``name``.

    ``<namespace>/<Name>-v0``: ``Name`` is the bundled class name when ``name``
    is a bundled environment's in any case (``gridworld`` -> ``GridWorld``),
    else ``name`` made valid for Gymnasium (:func:`gym_name`).
    """
    from ors_gym.envs import BUNDLED

    known = [*BUNDLED, *_CLASS_NAMES]
    cased = next((cls for cls in known if cls.lower() == name.lower()), None)
    return f"{namespace}/{gym_name(cased or name)}-v0"


#: Names of the classes given to :func:`register_class`, as written (for :func:`remote_id`).
_CLASS_NAMES: list[str] = []


def register_class(
    env_class: type,
    env_id: str | None = None,
    *,
    max_episode_steps: int = REMOTE_MAX_STEPS,
    **env_kwargs: Any,
) -> str:
    """Give an SDK environment class a Gymnasium id; returns the id.

    ``register_class(MyEnv)`` registers ``"ors/MyEnv-v0"`` (the class name as
    written; ``env_id=`` picks another), hosted in this process, so
    ``gym.make(id)`` and ``gym.make_vec(id, num_envs=N,
    vectorization_mode="vector_entry_point")`` both run it. ``env_kwargs`` are
    env options (``split``, ``no_tool_call``...). The class is recorded by its
    ``module:Class`` path when that import finds it (so subprocess vector envs
    can rebuild it), else as the class itself. A bundled id is never replaced:
    a class named like a bundled one needs ``env_id=``.
    """
    from ors_gym.backends.local.sdk import load_environment_classes

    try:
        (cls,) = load_environment_classes([env_class])
    except TypeError as exc:
        raise TypeError(
            f"register_class takes an SDK environment class (a subclass of "
            f"openreward.environments.Environment), got {env_class!r}"
        ) from exc
    chosen = env_id or f"{NAMESPACE}/{gym_name(cls.__name__)}-v0"
    previous = gym.registry.get(chosen)
    if previous is not None and previous.kwargs.get("env_class") not in (None, cls, _path(cls)):
        from ors_gym.envs import BUNDLED

        if previous.kwargs.get("env_class") in BUNDLED.values():
            raise ValueError(
                f"{chosen} is the bundled {previous.name}; give {cls.__name__} another id, "
                f"e.g. register_class({cls.__name__}, env_id='{NAMESPACE}/My{previous.name}-v0')"
            )
        logger.warning("register_class: %s now runs %s, no longer %s", chosen,
                       _path(cls) or cls.__qualname__, previous.kwargs.get("env_class"))
    if cls.__name__ not in _CLASS_NAMES:
        _CLASS_NAMES.append(cls.__name__)
    _register(chosen, max_episode_steps, {"env_class": _path(cls) or cls, **env_kwargs})
    return chosen


def _path(cls: type) -> str | None:
    """``module:Class`` when importing that finds ``cls`` itself, else None."""
    import importlib

    if cls.__module__ == "__main__" or "<" in cls.__qualname__:
        return None
    try:
        found = getattr(importlib.import_module(cls.__module__), cls.__qualname__, None)
    except ImportError:
        return None
    return f"{cls.__module__}:{cls.__qualname__}" if found is cls else None


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
    namespace: str = REMOTE_NAMESPACE,
    **env_kwargs: Any,
) -> list[str]:
    """Register ``<namespace>/<Name>-v0`` for each environment the server at ``base_url`` lists.

    The ids are :func:`remote_id`'s: ``ors-remote/Math-v0`` for a server's
    ``math``, beside the in-process ``ors/Math-v0``. Registering a second server
    with the same names replaces the first one's ids (logged); give it another
    ``namespace`` (``"ors-gpu"``: letters, digits, ``_``, ``-``) to keep both.
    Returns the registered ids; ``gym.make(id)`` then talks to that server.
    """
    if not re.fullmatch(r"[\w-]+", namespace) or namespace == NAMESPACE:
        raise ValueError(
            f"namespace={namespace!r}: use letters, digits, '_' and '-', and not {NAMESPACE!r} "
            "(the in-process ids' namespace)"
        )
    from ors_gym.backends.http import HttpBackend

    backend = HttpBackend(base_url, api_key=api_key)
    try:
        names = backend.list_environments()
    finally:
        backend.close()
    ids = [remote_id(name, namespace) for name in names]
    clashing = sorted({i for i in ids if ids.count(i) > 1})
    if clashing:
        raise ValueError(
            f"the server at {redact_url(base_url)} lists environments whose ids would clash "
            f"({', '.join(clashing)}); register them by hand with gym.register"
        )
    for name, env_id in zip(names, ids, strict=True):
        previous = gym.registry.get(env_id)
        if previous is not None and previous.kwargs.get("base_url") != base_url:
            logger.warning(
                "register_server: %s now runs at %s, no longer at %s; "
                "pass namespace=... to keep both",
                env_id,
                redact_url(base_url),
                redact_url(str(previous.kwargs.get("base_url"))),
            )
        kwargs: dict[str, Any] = {"base_url": base_url, "env_name": name, **env_kwargs}
        if api_key is not None:
            kwargs["api_key"] = Secret(api_key)
        _register(env_id, max_episode_steps, kwargs)
    return ids


def hosted_id(deployment: str, variant: str | None = None) -> str:
    """The id :func:`register_hosted` gives ``deployment`` (``"Namespace/name"``).

    Gym ids allow one ``/`` (before the name) and read ``:`` as a module to
    import, so the deployment's ``/`` becomes a ``.``: ``openreward/Namespace.name-v0``;
    a variant follows another ``.`` (``openreward/Namespace.name.variant-v0``).
    Other characters Gymnasium does not accept become ``_`` (:func:`gym_name`).
    """
    if not isinstance(deployment, str) or not re.fullmatch(r"[^/\s]+(/[^/\s]+)?", deployment):
        raise ValueError(f"deployment must be 'Namespace/name', got {deployment!r}")
    name = ".".join(gym_name(part) for part in deployment.split("/"))
    if variant is not None:
        name += "." + gym_name(variant)
    return f"{HOSTED_NAMESPACE}/{name}-v0"


def register_hosted(
    deployment: str,
    variant: str | None = None,
    *,
    max_episode_steps: int = REMOTE_MAX_STEPS,
    **env_kwargs: Any,
) -> str:
    """Register a hosted OpenReward deployment as a Gymnasium id; returns the id.

    ``register_hosted("Namespace/name")`` registers ``"openreward/Namespace.name-v0"``
    (see :func:`hosted_id` for the scheme; with ``variant="v2"``,
    ``"openreward/Namespace.name.v2-v0"``), so ``gym.make(id)`` and
    ``gym.make_vec(id, num_envs=N, vectorization_mode="vector_entry_point")`` reach
    it. Nothing is asked of the platform here. ``env_kwargs`` are env options
    (``api_key``, ``toolset``, ``setup_timeout``, ``base_url``...); without
    ``api_key`` and ``base_url`` the env reads ``OPENREWARD_API_KEY`` and the
    SDK's session host when it is made. An ``api_key``, ``secrets`` or
    ``env_overrides`` given are kept as ``Secret`` (never shown in the registry's specs).
    """
    env_id = hosted_id(deployment, variant)
    kwargs: dict[str, Any] = {"deployment": deployment, **env_kwargs}
    if variant is not None:
        kwargs["variant"] = variant
    _register(env_id, max_episode_steps, redact_kwargs(kwargs))
    return env_id


def task_count(
    env_id: str, split: str, env_kwargs: Mapping[str, Any], first: int | None = None
) -> int:
    """How many tasks ``gym.make(env_id, **env_kwargs)`` has in ``split``, at most
    ``first``: the rows a trainer's dataset holds, each naming a task by index."""
    made = gym.make(env_id, **env_kwargs)
    try:
        count: int = made.unwrapped.num_tasks(split)  # type: ignore[attr-defined]
    finally:
        made.close()
    return count if first is None else min(count, first)


_WHERE = ("base_url", "env_class", "env_name")


def async_env_arguments(env_id: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``AsyncOrsEnv``'s keyword arguments for a registered ORS id: the id's own, then
    ``overrides`` (a bundled id given a ``base_url`` talks to that server, by its name)."""
    if env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("ors"))
        raise ValueError(f"unknown environment id {env_id!r}; registered ORS ids: {known}")
    spec = gym.spec(env_id)
    if spec.entry_point != ENTRY_POINT:
        raise TypeError(f"{env_id!r} is not an ORS environment id ({spec.entry_point})")
    kwargs = {**spec.kwargs, **dict(overrides or {})}
    kwargs.pop("render_mode", None)
    where = {k: kwargs.pop(k) for k in _WHERE if k in kwargs}
    if where.get("base_url") is not None:
        where.pop("env_class", None)
        if not where.get("env_name"):  # a bundled id served elsewhere: ors/QA-v0 -> "qa"
            where["env_name"] = spec.name.lower()
    return {**where, **kwargs}
