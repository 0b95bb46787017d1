"""Driving the async core from blocking code, with no event loop.

``OrsEnv`` runs ``AsyncOrsEnv``'s coroutines over a blocking backend: each
await of the backend returns at once (``Awaiting`` calls the blocking method
and hands back its result), so a coroutine finishes on its first ``send`` and
``run_blocking`` needs no event loop. That keeps ``OrsEnv`` free of loop
overhead and usable where a loop already runs (Jupyter) or none may (a
forked worker).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["Awaiting", "run_blocking"]

_T = TypeVar("_T")


def run_blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine that never suspends; its result, or what it raised."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError(
        "the env's coroutine waited on something other than its blocking backend; "
        "use AsyncOrsEnv (awaited on an event loop) for asynchronous work"
    )


class Awaiting:
    """An ``AsyncBackend`` face over a blocking ``Backend``: each method is awaitable and
    does its blocking work when awaited. Attributes that are not methods pass through."""

    #: Its awaits complete at once, in order: the core awaits them one by one, never gathers.
    blocking = True

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.location: str = backend.location

    async def call(self, env_name: str, session_id: str, name: str, arguments: Any) -> Any:
        return self.backend.call(env_name, session_id, name, arguments)  # the hot path

    async def aclose(self) -> None:
        self.backend.close()

    async def probe(self) -> None:
        probe = getattr(self.backend, "probe", None)
        if probe is not None:
            probe()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.backend, name)
        if not callable(target):
            return target
        method = _awaitable(target)
        setattr(self, name, method)  # found directly next time
        return method

    def __repr__(self) -> str:
        return f"Awaiting({self.backend!r})"


def _awaitable(fn: Callable[..., _T]) -> Callable[..., Coroutine[Any, Any, _T]]:
    async def call(*args: Any, **kwargs: Any) -> _T:
        return fn(*args, **kwargs)

    return call
