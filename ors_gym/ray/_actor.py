"""The rollout actor: many ORS sessions at once on one event loop, one episode per call.

:class:`RolloutWorker` is a plain class; :mod:`ors_gym.ray.rollouts` makes it
an async Ray actor (``max_concurrency`` = sessions per actor). Its
:meth:`~RolloutWorker.episode` is an async generator, which Ray streams to
the driver item by item: first ``{"opened": session_id, "server": url}`` as
soon as the session exists (so the driver can delete it should this actor
die), then ``{"record": trajectory}`` when the episode ends. Each episode is
an :class:`~ors_gym.AsyncOrsEnv` over a backend shared by the actor's
sessions (one per server, or one in-process). The record is written by
:class:`~ors_gym.wrappers.RecordTrajectories` itself, over a replay of the
episode, so it is the same record a recorded ``OrsEnv`` writes. Cancelling an
episode (``ray.cancel``) deletes its session (``AsyncOrsEnv`` does on
cancellation); a killed or shut-down actor runs no cleanup, so the driver
deletes the sessions it was told of.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym

from ors_gym.async_env import AsyncOrsEnv, make_async_backend
from ors_gym.backends.base import AsyncBackend
from ors_gym.settings import EnvSettings
from ors_gym.trajectories import read_trajectories
from ors_gym.wrappers import Conversation, RecordTrajectories

__all__ = ["INPUTS", "RolloutWorker"]

#: What the policy is given: the env's observation, or the conversation (OpenAI messages).
INPUTS = ("observation", "conversation")

class _Replay(gym.Env[Any, Any]):
    """A blocking env that returns what the async episode already got, for the recorders."""

    def __init__(self, env: AsyncOrsEnv) -> None:
        self.location = env.location
        self.max_calls_per_step = env.settings.max_calls_per_step
        self.next: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.next

    def step(self, action: Any) -> Any:
        return self.next


class RolloutWorker:
    """Runs episodes of ``policy`` against ORS environments; one instance per Ray actor.

    ``env``: ``AsyncOrsEnv``'s keyword arguments (``env_name``, ``env_class``,
    settings such as ``max_steps``), without ``base_url`` (each episode names
    its server). ``policy(observation, tools)`` returns an action (any
    ``OrsEnv`` action, or a model client's reply); it may be ``async``;
    a blocking one runs in a thread. ``tools`` is the session's tools in the
    OpenAI function-calling format. ``inputs`` chooses what ``observation``
    is: ``"observation"`` (``{"text", "images"}``) or ``"conversation"``
    (the episode so far as OpenAI chat messages). ``threads``: how many
    blocking policy calls may run at once (give the actor's concurrency).
    Records go through a JSON-lines file per episode in ``record_dir`` (a
    temporary folder by default), removed once read back.
    """

    def __init__(
        self,
        policy: Callable[[Any, list[dict[str, Any]]], Any],
        env: Mapping[str, Any],
        *,
        inputs: str = "conversation",
        env_id: str | None = None,
        record_dir: str | None = None,
        threads: int = 16,
    ) -> None:
        if inputs not in INPUTS:
            raise ValueError(f"inputs={inputs!r}; choose one of {list(INPUTS)}")
        options = dict(env)
        self.policy = policy
        self.inputs = inputs
        self.env_id = env_id
        self.env_name = options.pop("env_name", None)
        self.env_class = options.pop("env_class", None)
        self.settings = EnvSettings.from_options(options)
        self._own_dir = record_dir is None
        self.record_dir = Path(record_dir or tempfile.mkdtemp(prefix="ors-rollouts-"))
        self.record_dir.mkdir(parents=True, exist_ok=True)
        self._backends: dict[str | None, AsyncBackend] = {}
        self._async_policy = _is_async(policy)
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ors-policy")

    def pid(self) -> int:
        """This actor's process id (for tests and logs)."""
        return os.getpid()

    async def episode(self, job: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Play one episode of ``job`` (``task``: reset options, ``server``, ``seed``).

        Yields ``{"opened": sid, "server": url}`` once the session exists, then
        ``{"record": trajectory}``. Errors raised by the policy or the env
        propagate (the driver reports them); the session is deleted in every case.
        """
        server = job.get("server")
        env = AsyncOrsEnv(
            env_name=self.env_name,
            env_class=None if server is not None else self.env_class,
            backend=self._backend(server),
            settings=self.settings,
        )
        replay = _Replay(env)
        stack: gym.Env[Any, Any] = replay
        if self.inputs == "conversation":
            stack = Conversation(stack, format="openai")
        path = self.record_dir / f"{uuid.uuid4().hex}.jsonl"
        recorder = RecordTrajectories(stack, path)
        try:
            try:
                replay.next = await env.reset(seed=job.get("seed"), options=job.get("task"))
                yield {"opened": env.session_id, "server": server}
                observation, _ = recorder.reset(seed=job.get("seed"), options=job.get("task"))
                done = False
                while not done:
                    action = await self._act(observation, env.tools_as("openai"))
                    replay.next = await env.step(action)
                    observation, _, terminated, truncated, _ = recorder.step(action)
                    done = bool(terminated or truncated)
            finally:
                recorder.close()
                await env.close()
            (record,) = read_trajectories(path)
        finally:
            path.unlink(missing_ok=True)
        record["env_id"] = self.env_id
        yield {"record": record}

    async def close(self) -> None:
        """Close every backend (deleting any session still open)."""
        backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            await backend.aclose()
        self._threads.shutdown(wait=False)
        if self._own_dir:
            shutil.rmtree(self.record_dir, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------------
    async def _act(self, observation: Any, tools: list[dict[str, Any]]) -> Any:
        if self._async_policy:
            return await self.policy(observation, tools)
        loop = asyncio.get_running_loop()
        action = await loop.run_in_executor(self._threads, self.policy, observation, tools)
        if inspect.isawaitable(action):
            action = await action
        return action

    def _backend(self, server: str | None) -> AsyncBackend:
        backend = self._backends.get(server)
        if backend is None:
            backend = make_async_backend(self.settings, base_url=server, env_class=self.env_class)
            self._backends[server] = backend
        return backend


def _is_async(policy: Any) -> bool:
    call = getattr(policy, "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(policy) or inspect.iscoroutinefunction(call)
