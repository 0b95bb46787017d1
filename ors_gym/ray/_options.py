"""What :func:`~ors_gym.ray.rollouts` is given, made into what its actors take.

``actor_env_kwargs``: the ``AsyncOrsEnv`` keyword arguments of every actor, from a
registered id or explicit names (an env class travels as ``"module:Class"``);
``task_options``: one task as reset options; ``check_task_indices``: every task index
within its split, checked before any actor starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["actor_env_kwargs", "check_task_indices", "task_options"]


def actor_env_kwargs(
    env_id: str | None,
    env_name: str | None,
    env_class: Any,
    servers: Sequence[str] | None,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """``AsyncOrsEnv`` keyword arguments for the actors, from an id or explicit names."""
    env: dict[str, Any] = {}
    if env_id is not None:
        import gymnasium as gym

        import ors_gym  # noqa: F401 - registers the ors/... ids

        spec = gym.spec(env_id)
        env.update(spec.kwargs)
        if spec.max_episode_steps is not None:
            env.setdefault("max_steps", spec.max_episode_steps)
        if servers and not env.get("env_name"):
            env["env_name"] = spec.name.lower()  # ors/GridWorld-v0 -> "gridworld"
        env.pop("base_url", None)
    if env_name is not None:
        env["env_name"] = env_name
    if env_class is not None:
        env["env_class"] = env_class
    if servers:
        env.pop("env_class", None)
    elif env.get("env_class") is None:
        raise ValueError("rollouts need servers=[url, ...], env_class=... or an in-process env_id")
    env.update(options)
    if isinstance(env.get("env_class"), type):
        cls = env["env_class"]
        env["env_class"] = f"{cls.__module__}:{cls.__qualname__}"
    return env


def task_options(task: Mapping[str, Any] | int) -> dict[str, Any]:
    """Reset options (a copy) from reset options or a task index of the default split."""
    if isinstance(task, int) and not isinstance(task, bool):
        return {"index": task}
    if isinstance(task, Mapping):
        return dict(task)
    raise TypeError(f"a task is reset options (a dict) or a task index, got {task!r}")


def check_task_indices(jobs: Iterable[Any], env: Mapping[str, Any], server: str | None) -> None:
    """Refuse a task whose ``index`` is outside its split, naming the split's size.

    Asked of the environment once (on ``server``, or in this process), before any
    actor starts: an index past the end would otherwise fail on an actor, episode
    by episode. Negative indices count from the end, as ``reset`` reads them.
    """
    indexed = [job for job in jobs if "index" in job.task and "task_spec" not in job.task]
    if not indexed:
        return
    from ors_gym.env import OrsEnv

    options = dict(env)
    probe = OrsEnv(base_url=server, env_name=options.pop("env_name", None),
                   env_class=options.pop("env_class", None), **options)
    try:
        sizes: dict[str, int] = {}
        for job in indexed:
            split = job.task.get("split") or probe.default_split()
            if split not in sizes:
                sizes[split] = probe.num_tasks(split)
            index, size = job.task["index"], sizes[split]
            if not isinstance(index, int) or not -size <= index < size:
                raise ValueError(
                    f"task {job.index} asks for index {index!r} of split {split!r}, which has "
                    f"{size} tasks (indices 0 to {size - 1}); pass tasks=range({size}) or "
                    "fewer, or repeat indices to run a task again"
                )
    finally:
        probe.close()
