"""The vector env's sub-envs at work on its loop: steps, resets, autoresets, shutdown.

These methods run on the runtime's loop (``ors_gym._runtime``), never in the
caller's thread: ``OrsVectorEnv`` hands them work through ``Runtime.call_soon``
and ``Runtime.run``, and their results come back through a ``Mailbox``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from gymnasium.vector import AutoresetMode

from ors_gym._runtime import Runtime
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.backends.base import AsyncBackend
from ors_gym.errors import OrsConnectionError, OrsError
from ors_gym.turn import Turn
from ors_gym.vector._health import ServerHealth
from ors_gym.vector._mailbox import Mailbox
from ors_gym.vector._results import Outcome, raise_first

__all__ = ["SubEnvRunner", "release"]

logger = logging.getLogger("ors_gym")


class SubEnvRunner:
    """The loop's side of ``OrsVectorEnv`` (a mixin: the attributes are the env's)."""

    envs: list[AsyncOrsEnv]
    env_name: str
    autoreset_mode: AutoresetMode
    _tasks: dict[int, asyncio.Task[Outcome]]
    _pending_deletes: set[asyncio.Task[None]]
    _health: ServerHealth
    _done: Mailbox

    def _absorb(self, outcomes: Sequence[Outcome]) -> None:
        raise NotImplementedError



    def _launch(
        self, launches: list[tuple[int, Turn | None, concurrent.futures.Future[Outcome]]]
    ) -> None:
        loop = asyncio.get_running_loop()
        for i, turn, future in launches:
            task = loop.create_task(self._advance(i, turn))
            self._tasks[i] = task
            task.add_done_callback(partial(self._landed, i, future))

    def _landed(self, index: int, future: concurrent.futures.Future[Outcome],
                task: asyncio.Task[Outcome]) -> None:
        if self._tasks.get(index) is task:
            del self._tasks[index]
        if task.cancelled():
            future.cancel()
        elif task.exception() is not None:
            future.set_exception(task.exception())
        else:
            future.set_result(task.result())
        self._done.put((index, future))

    async def _advance(self, i: int, turn: Turn | None) -> Outcome:
        env = self.envs[i]
        if turn is None:  # NEXT_STEP autoreset: this step opens the next episode
            return await self._autoreset(i)
        try:
            obs, reward, terminated, truncated, info = await env.run(turn)
        except OrsError as exc:
            exc.add_note(f"in sub-env {i} of {self!r}")
            raise
        failure = turn.failure
        if isinstance(failure, OrsConnectionError):
            await self._check_server(i, failure)
            if env.backend in self._health.down:
                info["error_reason"] = "server_unreachable"
        if self.autoreset_mode is AutoresetMode.SAME_STEP and (terminated or truncated):
            new_obs, new_info = await self._open(i, {})
            new_info["final_obs"] = obs
            new_info["final_info"] = info
            return Outcome(i, new_obs, reward, terminated, truncated, new_info, env.tools,
                            failure)
        return Outcome(i, obs, reward, terminated, truncated, info, None, failure)

    async def _open(self, i: int, options: Mapping[str, Any]
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The sub-env's reset: its old session deleted in the background, a new one opened."""
        env = self.envs[i]
        old, env.session_id = env.session_id, None
        if old is not None:
            self._delete_later(env.backend, old)
        try:
            return await env.open(options)
        except OrsError as exc:
            exc.add_note(f"while resetting sub-env {i} of {self!r}")
            raise

    async def _reset_batch(self, ids: list[int], options: dict[int, dict[str, Any]]
                           ) -> list[Outcome]:
        await self._cancel([self._tasks[i] for i in ids if i in self._tasks])

        async def one(i: int) -> Outcome:
            obs, info = await self._open(i, options[i])
            return Outcome(i, obs, 0.0, False, False, info, self.envs[i].tools)

        results = await asyncio.gather(*(one(i) for i in ids), return_exceptions=True)
        outcomes = [r for r in results if isinstance(r, Outcome)]
        self._absorb(outcomes)
        raise_first([r for r in results if isinstance(r, BaseException)])
        return outcomes

    async def _autoreset(self, i: int) -> Outcome:
        """Open the sub-env's next episode; while its server is down (other servers up),
        a truncated step saying so instead, so the next step tries again."""
        server = self.envs[i].backend
        health = self._health
        if server in health.down and await health.probe(server) is not None:
            return health.unreachable(i, server, self.env_name)
        try:
            obs, info = await self._open(i, {})
        except OrsConnectionError as exc:
            await self._check_server(i, exc)
            if server not in health.down:
                raise
            return health.unreachable(i, server, self.env_name, exc)
        return Outcome(i, obs, 0.0, False, False, info, self.envs[i].tools)

    async def _check_server(self, i: int, failure: OrsError) -> None:
        """After a connection failure: note the sub-env's server down if its probe fails,
        and raise if every server is down."""
        server = self.envs[i].backend
        hosted = [j for j, env in enumerate(self.envs) if env.backend is server]
        await self._health.check(server, i, failure, hosted, self.env_name)

    def _delete_later(self, server: AsyncBackend, session_id: str) -> None:
        async def delete() -> None:
            try:
                await server.delete_session(session_id)
            except Exception as exc:  # best effort: the session may be gone with its server
                logger.debug("could not delete session %s: %s", session_id, exc)

        task = asyncio.get_running_loop().create_task(delete())
        self._pending_deletes.add(task)
        task.add_done_callback(self._pending_deletes.discard)

    async def _cancel(self, tasks: Sequence[asyncio.Task[Any]]) -> None:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def shutdown(self) -> None:
        """Cancel what runs, then let every pending deletion finish (on the loop)."""
        await self._cancel([*self._tasks.values(), *self._health.tasks()])
        if self._pending_deletes:
            await asyncio.wait(list(self._pending_deletes))


def release(
    runtime: Runtime,
    servers: Sequence[AsyncBackend],
    client: Any,
    envs: Sequence[AsyncOrsEnv],
    vector: SubEnvRunner | None = None,
) -> None:
    """Delete every session, close backends and the shared client, close the loop."""

    async def close_all() -> None:
        if vector is not None:
            await vector.shutdown()
        await asyncio.gather(*(env.end_session() for env in envs), return_exceptions=True)
        results = await asyncio.gather(*(s.aclose() for s in servers), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                logger.debug("closing an OrsVectorEnv backend failed: %s", result)
        if client is not None:
            await client.aclose()

    try:
        runtime.close(close_all())
    except Exception as exc:
        logger.debug("closing OrsVectorEnv failed: %s", exc)
