"""How every trainer bridge opens an ORS episode: a row naming it, over shared backends.

An :class:`EpisodeRow` names one episode (a ``gymnasium.make`` id, its keyword
arguments, the reset options naming the task). :class:`EnvPool` turns rows
into ``AsyncOrsEnv`` episodes over ONE backend (and one discovery catalog) per
environment id and arguments, made at the first row that names them and kept
until ``aclose``: a thousand episodes of one environment share one connection
pool and one ``/tools`` discovery instead of opening their own. A pool lives
on one event loop; :func:`shared_pool` gives the running loop's own, for
code that cannot pass one along (veRL makes an agent loop per sample), closed
when that loop shuts down its async generators.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_gym.async_env import AsyncOrsEnv, class_env_name
from ors_gym.backends.base import AsyncBackend
from ors_gym.backends.factory import make_async_backend, make_async_backends
from ors_gym.catalog import Catalog
from ors_gym.registration import async_env_arguments
from ors_gym.settings import EnvSettings

__all__ = ["EnvPool", "EpisodeRow", "shared_pool"]


@dataclass(frozen=True)
class EpisodeRow:
    """One episode: the env id, its ``make`` keyword arguments and reset options."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], **defaults: Any) -> EpisodeRow:
        """Read a dataset row's columns (``extra_info`` first, then the top level over it):
        ``env_id``, ``split``, ``index`` (or ``task_index``) or ``task_spec``, ``seed``,
        ``env_kwargs``; ``defaults`` are ``env_kwargs`` under the row's own."""
        extra = row.get("extra_info")
        merged: dict[str, Any] = dict(extra) if isinstance(extra, Mapping) else {}
        merged.update({k: v for k, v in row.items() if k != "extra_info" and v is not None})
        env_id = merged.get("env_id")
        if not env_id:
            raise ValueError(
                "the row needs its env_id (a gymnasium.make id such as 'ors/QA-v0') in "
                "extra_info or a column of its own; ors_gym.verl.rows(env_id) and "
                "ors_gym.skyrl.rows(env_id) build such rows"
            )
        options: dict[str, Any] = {}
        index = merged.get("task_index", merged.get("index"))
        if merged.get("task_spec") is not None:
            options["task_spec"] = dict(merged["task_spec"])
        elif index is not None:
            options["index"] = int(index)
        if merged.get("split") is not None:
            options["split"] = str(merged["split"])
        kwargs = {**defaults, **dict(merged.get("env_kwargs") or {})}
        seed = merged.get("seed")
        return cls(str(env_id), kwargs, options, None if seed is None else int(seed))


@dataclass
class _Stack:
    """One environment's backend, catalog and settings, shared by its episodes."""

    env_id: str
    env_kwargs: dict[str, Any]
    backend: AsyncBackend
    catalog: Catalog
    settings: EnvSettings
    close_pool: Callable[[], Awaitable[None]] | None


class EnvPool:
    """One backend per environment id and ``make`` arguments, shared by every episode
    opened through it. Use on one event loop; ``aclose()`` closes them all.

    ``on_error`` is the episodes' default (``"truncate"``: a failing session ends its
    episode only; a row's own ``env_kwargs`` may say otherwise).
    """

    def __init__(self, *, on_error: str = "truncate") -> None:
        self._stacks: list[_Stack] = []
        self._on_error = on_error
        #: Backends made so far (one per environment id and arguments, ever).
        self.made = 0

    def env(self, row: EpisodeRow) -> AsyncOrsEnv:
        """A new ``AsyncOrsEnv`` for ``row`` over its environment's shared backend."""
        stack = self._stack(row)
        return AsyncOrsEnv(backend=stack.backend, catalog=stack.catalog,
                           settings=stack.settings)

    def _stack(self, row: EpisodeRow) -> _Stack:
        for stack in self._stacks:
            if stack.env_id == row.env_id and stack.env_kwargs == row.env_kwargs:
                return stack
        arguments = async_env_arguments(row.env_id, row.env_kwargs)
        base_url = arguments.pop("base_url", None)
        env_class = arguments.pop("env_class", None)
        env_name = arguments.pop("env_name", None)
        settings = EnvSettings.from_options(arguments, on_error=self._on_error)
        close_pool = None
        if base_url is not None:
            (backend,), close_pool = make_async_backends(settings, [base_url])
        else:
            backend = make_async_backend(settings, env_class=env_class)
            if env_name is None and isinstance(env_class, str | type):
                env_name = class_env_name(env_class)
        stack = _Stack(row.env_id, dict(row.env_kwargs), backend,
                       Catalog(backend, env_name, settings.split), settings, close_pool)
        self._stacks.append(stack)
        self.made += 1
        return stack

    async def aclose(self) -> None:
        """Close every backend (and its connection pool); the registry is empty after."""
        stacks, self._stacks = self._stacks, []
        for stack in stacks:
            try:
                await stack.backend.aclose()
            finally:
                if stack.close_pool is not None:
                    await stack.close_pool()

    def __repr__(self) -> str:
        return f"EnvPool({[s.env_id for s in self._stacks]})"


#: Each loop's pool, and the async generator that closes them at the loop's end.
_PER_LOOP: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[EnvPool, AsyncGenerator[None, None]]
] = weakref.WeakKeyDictionary()


def shared_pool() -> EnvPool:
    """The running event loop's own :class:`EnvPool` (made at first use): every caller
    on one loop opens its episodes over the same backends.

    They are closed (open sessions deleted, connection pools closed) when the loop
    finalizes its async generators: at the end of ``asyncio.run`` (or an
    ``asyncio.Runner``), or wherever ``loop.shutdown_asyncgens()`` is awaited before
    ``loop.close()``. A loop closed without that leaves them to the garbage collector
    (a closed loop can run nothing): ``await shared_pool().aclose()`` first there.
    """
    loop = asyncio.get_running_loop()
    entry = _PER_LOOP.get(loop)
    if entry is None:
        pool = EnvPool()
        closer = _close_at_shutdown(pool)
        _first_step(closer)  # the loop's asyncgen hooks now hold it: shutdown_asyncgens acloses it
        entry = _PER_LOOP[loop] = (pool, closer)
    return entry[0]


async def _close_at_shutdown(pool: EnvPool) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:  # the loop's shutdown_asyncgens, while the loop still runs
        await pool.aclose()


def _first_step(agen: AsyncGenerator[None, None]) -> None:
    """Run ``agen`` to its first ``yield`` now (it awaits nothing before it): the running
    loop's first-iteration hook registers it for ``shutdown_asyncgens``."""
    step = agen.__anext__()
    try:
        step.send(None)
    except StopIteration:
        return
    raise RuntimeError("the closer awaited before its first yield")  # pragma: no cover
