"""``BlockingFace``: a blocking backend over an async one, written once (and
``AsyncFace``, what the async backends share: ``async with``).

``HttpBackend`` and ``LocalBackend`` are this over ``AsyncHttpBackend`` and
``AsyncLocalBackend``: every method runs the async backend's coroutine on the
face's ``Runtime`` (its private loop, driven by the calling thread, so a call
costs no thread hop; background work such as keepalive pings runs between
calls). The face pickles as its async backend (which pickles as its
settings); the loop, connections and sessions are made again on first use,
also in a forked child.
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar, Generic, Self, TypeVar

from ors_gym._runtime import Runtime, after_fork_in_child, blocking
from ors_gym.backends.base import AsyncBackend

__all__ = ["AsyncFace", "BlockingFace", "blocking"]

_Core = TypeVar("_Core", bound=AsyncBackend)


class AsyncFace:
    """The async backends' context manager: ``async with backend:`` closes it on exit."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        raise NotImplementedError


class BlockingFace(Generic[_Core]):
    """The ``Backend`` interface, blocking, over an ``AsyncBackend`` (``core``).

    ``core`` is the async backend and ``runtime`` the loop it runs on; an env
    made over a face shares both (``backends.factory.async_face_of``).
    """

    #: Names the face's runtime thread and loop.
    _runtime_name: ClassVar[str] = "ors-backend"

    core: _Core
    runtime: Runtime
    location: str

    def __init__(self, core: _Core) -> None:
        self._attach(core)

    @classmethod
    def over(cls, core: _Core) -> Self:
        """The blocking face of an existing async backend ``core`` (not copied)."""
        face = cls.__new__(cls)
        face._attach(core)
        return face

    def _attach(self, core: _Core) -> None:
        self.core = core
        self.runtime = Runtime(self._runtime_name)
        self.location = core.location
        _LIVE.add(self)

    def __getstate__(self) -> dict[str, Any]:
        return {"core": self.core}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._attach(state["core"])

    def __repr__(self) -> str:
        core = repr(self.core)
        return type(self).__name__ + core[core.index("("):]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def open_sessions(self) -> frozenset[str]:
        """Ids of the sessions this backend opened and has not deleted."""
        return frozenset(getattr(self.core, "open_sessions", ()))

    list_environments = blocking(AsyncBackend.list_environments)
    tools = blocking(AsyncBackend.tools)
    splits = blocking(AsyncBackend.splits)
    tasks = blocking(AsyncBackend.tasks)
    num_tasks = blocking(AsyncBackend.num_tasks)
    task = blocking(AsyncBackend.task)
    task_range = blocking(AsyncBackend.task_range)
    create_session = blocking(AsyncBackend.create_session)
    prompt = blocking(AsyncBackend.prompt)
    messages = blocking(AsyncBackend.messages)
    task_tools = blocking(AsyncBackend.task_tools)
    call = blocking(AsyncBackend.call)
    score_group = blocking(AsyncBackend.score_group)
    delete_session = blocking(AsyncBackend.delete_session)
    ping = blocking(AsyncBackend.ping)
    probe = blocking(AsyncBackend.probe)

    def close(self) -> None:
        """Delete open sessions (best effort), stop background work, close the loop.

        Safe to call twice; the backend stays usable and starts again on next use.
        """
        self.runtime.close(self.core.aclose())

    def _after_fork(self) -> None:
        """In a forked child (its runtime has abandoned the parent's loop already): the
        parent's connections and sessions are not ours to use or close."""
        self.core.forget_sessions()  # type: ignore[attr-defined]


_LIVE: weakref.WeakSet[BlockingFace[Any]] = weakref.WeakSet()


def _forget_sessions_in_child() -> None:
    for face in list(_LIVE):
        face._after_fork()


after_fork_in_child(_forget_sessions_in_child)
