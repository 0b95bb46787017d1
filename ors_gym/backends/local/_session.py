"""One in-process session: an SDK environment instance, with setup() run as on the server.

The server's session lifecycle, minus the transport: ``open_session`` resolves
the task and builds the instance (``/create``), setup() runs in the background,
requests wait for it (``require_ready_session``), and ``close`` cancels a
running setup and calls teardown() (``/delete``). Tool calls go through the
SDK's own dispatch (``call_session_tool``), with its per-call tool
introspection answered from a cache inside these calls only.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Coroutine
from typing import Any

from ors_gym._compat.openreward import enable_introspection_cache
from ors_gym.backends.local import sdk as _sdk
from ors_gym.backends.local._values import Refused, exc_detail

__all__ = ["Session", "close_all", "dispatch", "open_session"]

logger = logging.getLogger("ors_gym")


class Session:
    """One live environment instance, with its setup running as on the server."""

    __slots__ = ("deleted", "env", "env_name", "error", "ready", "setup_task", "toolset")

    def __init__(self, env: Any, env_name: str, toolset: Any = None) -> None:
        self.env = env
        self.env_name = env_name
        self.toolset = toolset  # the session's SDK Toolset instance, or None
        self.ready = False  # setup() returned; the hot path checks only this
        self.error: BaseException | None = None
        self.deleted = False
        self.setup_task: asyncio.Task[None] | None = None

    async def run_setup(self) -> None:
        try:
            await _sdk.sdk.run_user_callable(self.env.setup)
        except Exception as exc:
            logger.debug("setup() of a %s session failed: %s", self.env_name, exc_detail(exc))
            self.error = exc
        else:
            self.ready = True

    async def wait_ready(self) -> None:
        """Wait for setup() like the server's ``require_ready_session``."""
        task = self.setup_task
        if task is not None and not task.done():
            await asyncio.wait((task,))
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self.deleted:
            raise Refused(410, "Session deleted")
        if self.error is not None:
            raise Refused(500, exc_detail(self.error))

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        await self.wait_ready()
        return await dispatch(self.env, name, arguments, self.toolset)

    async def prompt(self) -> Any:
        await self.wait_ready()
        return await _sdk.sdk.run_user_callable(self.env.get_prompt)

    async def messages(self) -> Any:
        await self.wait_ready()
        return list(await _sdk.sdk.run_user_callable(self.env.get_messages))

    async def task_tools(self) -> Any:
        # Like the server's require_existing_session: no wait for setup().
        self.raise_if_failed()
        enable_introspection_cache()
        return await _sdk.sdk.list_session_tools(self.env, self.toolset)

    async def score_group(self, candidates: list[Any]) -> list[Any]:
        await self.wait_ready()
        scores = await _sdk.sdk.run_user_callable(self.env.score_group, candidates)
        scores = [
            s if isinstance(s, _sdk.sdk.GroupScore) else _sdk.sdk.GroupScore(reward=float(s))
            for s in scores
        ]
        if len(scores) != len(candidates):
            raise ValueError(
                f"score_group returned {len(scores)} scores for {len(candidates)} candidates"
            )
        return scores

    async def close(self) -> None:
        """The server's ``_delete_session``: cancel a running setup, then teardown()."""
        self.deleted = True
        task = self.setup_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait((task,))
        try:
            await _run_hook(self.env.teardown)
        except Exception as exc:
            logger.warning("teardown() of a %s session failed: %s", self.env_name,
                           exc_detail(exc), exc_info=exc)


def dispatch(
    env: Any, name: str, arguments: dict[str, Any], toolset: Any = None
) -> Coroutine[Any, Any, Any]:
    """The SDK's own dispatch (the session's toolset first), with its per-call tool
    introspection cached for this call; await it at once, in the Task that called.

    A plain function returning the SDK's coroutine: one coroutine layer less per call.
    """
    enable_introspection_cache()  # this call's Task context only: see ors_gym/_compat/openreward.py
    return _sdk.sdk.call_session_tool(env, toolset, name, arguments)


async def _run_hook(fn: Any) -> Any:
    """``run_user_callable(fn)``, which also works while the interpreter exits.

    A session closed at exit (an env's finaliser, an atexit handler) finds the
    worker threads the SDK runs sync hooks in already shut down; the hook then
    runs on the loop itself rather than not at all. A hook that started and
    raised is never run twice.
    """
    if inspect.iscoroutinefunction(fn):
        return await fn()
    started = False

    def marked() -> Any:
        nonlocal started
        started = True
        return fn()

    try:
        return await _sdk.sdk.run_user_callable(marked)
    except RuntimeError:
        if started:
            raise
        logger.debug("no worker thread for %s (interpreter exiting); running it inline", fn)
        result = fn()
        return await result if inspect.isawaitable(result) else result


async def open_session(
    cls: Any, env_name: str, task_spec: Any, split: str | None, index: int | None,
    secrets: dict[str, str], toolset: str | None = None,
) -> Session:
    """The server's ``/create``: resolve the task, build the instance, bind the named
    session toolset to it (the SDK's own class from ``BUILTIN_TOOLSETS``), start setup()."""
    if task_spec is None:
        try:
            task_spec = await _sdk.sdk.run_user_callable(cls.get_task, split, index)
        except IndexError as exc:
            raise Refused(400, "Invalid index") from exc
    env = await _sdk.sdk.run_user_callable(cls, task_spec=task_spec, secrets=secrets)
    bound = None
    if toolset is not None:
        from openreward.toolsets import BUILTIN_TOOLSETS

        toolset_cls = BUILTIN_TOOLSETS.get(toolset)
        if toolset_cls is None:
            raise Refused(400, f"unknown toolset {toolset!r}; valid options are "
                               f"{sorted(BUILTIN_TOOLSETS.keys())}")
        try:
            bound = toolset_cls(env)
        except ValueError as exc:
            raise Refused(400, str(exc)) from exc
    session = Session(env, env_name, bound)
    session.setup_task = asyncio.get_running_loop().create_task(session.run_setup())
    await asyncio.sleep(0)  # let setup() start (a sync one enters its thread) before returning
    return session


async def close_all(sessions: list[Session]) -> None:
    await asyncio.gather(*(s.close() for s in sessions))
