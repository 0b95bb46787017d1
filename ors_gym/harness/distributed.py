"""Harness episodes as Ray tasks: one episode a task, a node running as many as it has room.

A harness process is heavy (a runtime of its own), so a cluster, not one machine, runs many.
:func:`ray_batch` submits each episode as a Ray task (``num_cpus`` and ``memory`` say
what one takes, for Ray's scheduler); the task runs a :class:`HarnessRunner` of its own
on its worker (the episode's MCP endpoint is served there, beside the harness) whose
model is the shared gateway, reached through its session API
(:class:`~ors_gym.harness.GatewayClient`: the gateway's address must be one the workers
can reach). An episode whose task fails comes back as ``harness_failed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ors_gym.errors import OrsDependencyError
from ors_gym.harness.batch import Progress, failed_episode
from ors_gym.harness.remote import GatewayClient
from ors_gym.harness.runner import HarnessEpisode, HarnessRunner
from ors_gym.harness.spec import Harness

__all__ = ["ray_batch"]


def _episode(harness: Harness, make_env: Callable[[int], Any], i: int, gateway_url: str,
             model: str, admin_key: str | None, options: dict[str, Any] | None,
             seed: int | None, deadline: float) -> HarnessEpisode:
    """One episode on this worker (the body of a Ray task)."""
    client = GatewayClient(gateway_url, model=model, admin_key=admin_key)

    async def play() -> HarnessEpisode:
        async with HarnessRunner(client) as runner:
            return await runner.run(harness, make_env(i), options=options, seed=seed,
                                    deadline=deadline)

    try:
        return asyncio.run(play())
    finally:
        client.close()


def ray_batch(harness: Harness, make_env: Callable[[int], Any], n: int, *, gateway_url: str,
              model: str, admin_key: str | None = None,
              options: Callable[[int], dict[str, Any] | None] | None = None,
              seed: int | None = None, deadline: float = 600.0, num_cpus: float = 1,
              memory: int | None = None,
              progress: Progress | None = None) -> list[HarnessEpisode]:
    """Play ``harness`` on ``n`` episodes as Ray tasks (``ray.init`` first); arguments as
    :func:`~ors_gym.harness.run_batch` takes them, plus the gateway's address
    (``gateway_url``, ``model``, ``admin_key``) and what one task needs (``num_cpus``,
    ``memory`` in bytes). ``make_env``, ``options`` and a callable harness are sent to
    the workers (cloudpickle). The episodes, in order."""
    try:
        import ray
    except ImportError as exc:
        raise OrsDependencyError(f"ray_batch needs Ray ({exc}): pip install 'ors-gym[ray]'"
                                 ) from exc
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    resources: dict[str, Any] = {"num_cpus": num_cpus, "max_retries": 0}
    if memory is not None:
        resources["memory"] = memory
    task = ray.remote(**resources)(_episode)
    refs = [task.remote(harness, make_env, i, gateway_url, model, admin_key,
                        options(i) if options else None, None if seed is None else seed + i,
                        deadline) for i in range(n)]
    index = {ref: i for i, ref in enumerate(refs)}
    episodes: list[HarnessEpisode | None] = [None] * n
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        i = index[ready[0]]
        try:
            episodes[i] = ray.get(ready[0])
        except Exception as exc:  # the task failed: its episode did, the batch goes on
            episodes[i] = failed_episode(harness, exc)
        if progress is not None:
            progress(n - len(pending), n, episodes[i])  # type: ignore[arg-type]
    return [e for e in episodes if e is not None]
