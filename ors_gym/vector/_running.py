"""``SubEnvs``: a vector env's sub-envs at work on its loop: steps, resets, autoresets.

Every coroutine here runs on the vector env's runtime loop (``ors_gym._runtime``),
started by ``OrsVectorEnv`` with ``Runtime.run``: its ``step`` and ``reset`` are
driven by the calling thread itself, and the steps ``send`` launches go on in
the background until ``recv`` takes them. A sub-env sent to has ONE in-flight
record, its task; a finished one is queued in finishing order for ``take``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from gymnasium.vector import AutoresetMode

from ors_gym._runtime import Runtime
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.backends.base import AsyncBackend
from ors_gym.errors import OrsConnectionError, OrsError
from ors_gym.turn import Turn
from ors_gym.vector._health import ServerHealth
from ors_gym.vector._results import Outcome

__all__ = ["Plan", "SubEnvs", "release"]

logger = logging.getLogger("ors_gym")

#: A sub-env's index and its planned step (None: it autoresets instead).
Plan = tuple[int, Turn | None]


class SubEnvs:
    """N ``AsyncOrsEnv`` stepped together on one loop, and the steps in flight after ``send``."""

    def __init__(self, envs: Sequence[AsyncOrsEnv], servers: Sequence[AsyncBackend],
                 autoreset_mode: AutoresetMode) -> None:
        self.envs = list(envs)
        self.autoreset_mode = autoreset_mode
        self.health = ServerHealth(servers)
        self.env_name = ""
        self._inflight: dict[int, asyncio.Task[Outcome]] = {}
        self._landed: list[int] = []  # finished sub-envs in flight, in finishing order
        self._waiter: tuple[int, asyncio.Future[None]] | None = None  # (how many, woken)
        self._deletes: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        """The vector env's name in error notes (held apart from it: its finaliser uses this)."""
        where = ", ".join(s.location for s in self.health.servers)
        return f"OrsVectorEnv({self.env_name or '?'}, num_envs={len(self.envs)}, {where})"

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Sub-envs launched whose results ``take`` has not returned yet."""
        return tuple(sorted(self._inflight))

    # -- stepping -------------------------------------------------------------------------

    async def step(self, plans: Sequence[Plan]) -> list[Outcome | BaseException]:
        """Every planned step together; each sub-env's outcome, or what it raised."""
        if len(plans) == 1:  # one sub-env: awaited in place, no task of its own
            try:
                return [await self._advance(*plans[0])]
            except Exception as exc:
                return [exc]
        return list(await asyncio.gather(*(self._advance(i, turn) for i, turn in plans),
                                         return_exceptions=True))

    async def launch(self, plans: Sequence[Plan]) -> None:
        """Start the planned steps as tasks, and return at once."""
        loop = asyncio.get_running_loop()
        for i, turn in plans:
            task = loop.create_task(self._advance(i, turn))
            self._inflight[i] = task
            task.add_done_callback(partial(self._land, i))

    async def take(self, at_least: int, at_most: int,
                   timeout: float | None) -> list[tuple[int, asyncio.Task[Outcome]]]:
        """Wait for ``at_least`` launched steps, then take up to ``at_most`` in finishing
        order. TimeoutError after ``timeout`` seconds, taking nothing."""
        if len(self._landed) < at_least:
            woken = asyncio.get_running_loop().create_future()
            self._waiter = (at_least, woken)
            try:
                async with asyncio.timeout(timeout):
                    await woken
            finally:
                self._waiter = None
        taken, self._landed = self._landed[:at_most], self._landed[at_most:]
        return [(i, self._inflight.pop(i)) for i in taken]

    def _land(self, i: int, task: asyncio.Task[Outcome]) -> None:
        if self._inflight.get(i) is not task:  # cancelled by a reset
            return
        self._landed.append(i)
        waiter = self._waiter
        if waiter is not None and len(self._landed) >= waiter[0] and not waiter[1].done():
            waiter[1].set_result(None)

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
            if env.backend in self.health.down:
                info["error_reason"] = "server_unreachable"
        if self.autoreset_mode is AutoresetMode.SAME_STEP and (terminated or truncated):
            new_obs, new_info = await self._open(i, {})
            new_info["final_obs"] = obs
            new_info["final_info"] = info
            return Outcome(i, new_obs, reward, terminated, truncated, new_info, env.tools,
                           failure)
        return Outcome(i, obs, reward, terminated, truncated, info, None, failure)

    # -- resets ---------------------------------------------------------------------------

    async def reset(self, ids: Sequence[int], options: Mapping[int, Mapping[str, Any]]
                    ) -> list[Outcome | BaseException]:
        """Cancel what ``ids`` have in flight, then open a new session in each."""
        await self.cancel(ids)

        async def one(i: int) -> Outcome:
            obs, info = await self._open(i, options[i])
            return Outcome(i, obs, 0.0, False, False, info, self.envs[i].tools)

        return list(await asyncio.gather(*(one(i) for i in ids), return_exceptions=True))

    async def _open(self, i: int, options: Mapping[str, Any]
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The sub-env's reset: its old session deleted in the background, a new one opened."""
        env = self.envs[i]
        old = env.release_session()
        if old is not None:
            self._delete_later(env.backend, old)
        try:
            return await env.open(options)
        except OrsError as exc:
            exc.add_note(f"while resetting sub-env {i} of {self!r}")
            raise

    async def _autoreset(self, i: int) -> Outcome:
        """Open the sub-env's next episode; while its server is down (other servers up),
        a truncated step saying so instead, so the next step tries again."""
        server = self.envs[i].backend
        health = self.health
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
        await self.health.check(server, i, failure, hosted, self.env_name)

    def _delete_later(self, server: AsyncBackend, session_id: str) -> None:
        async def delete() -> None:
            try:
                await server.delete_session(session_id)
            except Exception as exc:  # best effort: the session may be gone with its server
                logger.debug("could not delete session %s: %s", session_id, exc)

        task = asyncio.get_running_loop().create_task(delete())
        self._deletes.add(task)
        task.add_done_callback(self._deletes.discard)

    # -- stopping -------------------------------------------------------------------------

    async def cancel(self, ids: Sequence[int]) -> None:
        """Cancel the steps ``ids`` have in flight; their results are dropped."""
        tasks = [self._inflight.pop(i) for i in ids if i in self._inflight]
        self._landed = [i for i in self._landed if i in self._inflight]
        await _cancel(tasks)

    async def shutdown(self) -> None:
        """Cancel what runs, then let every pending deletion finish."""
        tasks = [*self._inflight.values(), *self.health.tasks()]
        self._inflight.clear()
        self._landed.clear()
        await _cancel(tasks)
        if self._deletes:
            await asyncio.wait(list(self._deletes))


async def _cancel(tasks: Sequence[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks)


def release(
    runtime: Runtime,
    servers: Sequence[AsyncBackend],
    close_pool: Callable[[], Awaitable[None]] | None,
    subenvs: SubEnvs | None,
) -> None:
    """Delete every session, close the backends and their shared pool, close the loop."""

    async def close_all() -> None:
        if subenvs is not None:
            await subenvs.shutdown()
            await asyncio.gather(*(env.end_session() for env in subenvs.envs),
                                 return_exceptions=True)
        results = await asyncio.gather(*(s.aclose() for s in servers), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                logger.debug("closing an OrsVectorEnv backend failed: %s", result)
        if close_pool is not None:
            await close_pool()

    try:
        runtime.close(close_all())
    except Exception as exc:
        logger.debug("closing OrsVectorEnv failed: %s", exc)
