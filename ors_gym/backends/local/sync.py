"""``LocalBackend``: the blocking face of ``AsyncLocalBackend``, on a ``Runtime``.

Every method runs the async backend's coroutine on the face's runtime
(``ors_gym._runtime``): its private loop, driven by the calling thread, so a
tool call that never waits costs one loop pass and no thread hop beyond the
SDK's own ``asyncio.to_thread`` for sync tools. Async background work an
environment spawns goes on between calls (the runtime's background driver).

The backend pickles as its environment specs (``AsyncVectorEnv`` workers); the
loop and sessions are made again on first use, also in a forked child.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

from ors_gym._runtime import Runtime, blocking
from ors_gym.backends.local._values import LOCATION
from ors_gym.backends.local.async_ import AsyncLocalBackend, EnvSpec

__all__ = ["LocalBackend"]

_A = AsyncLocalBackend


class LocalBackend:
    """SDK ``Environment`` classes served in this process, blocking; see ``AsyncLocalBackend``.

    ``environments`` is one class or ``"module:Class"`` string, or a sequence
    of them; the first is the default. Needs the ``local`` extra
    (``pip install 'ors-gym[local]'``).
    """

    location: str = LOCATION

    def __init__(self, environments: EnvSpec | Sequence[EnvSpec]) -> None:
        self.core = AsyncLocalBackend(environments)
        self.runtime = Runtime("ors-local")
        _LIVE.add(self)

    def __getstate__(self) -> dict[str, Any]:
        return {"core": self.core}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.core = state["core"]
        self.runtime = Runtime("ors-local")
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"LocalBackend([{', '.join(self.core.list_names())}])"

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def open_sessions(self) -> frozenset[str]:
        """Ids of the sessions created and not yet deleted."""
        return self.core.open_sessions

    def environment_class(self, env_name: str) -> type:
        """The SDK class served as ``env_name``."""
        return self.core.environment_class(env_name)

    list_environments = blocking(_A.list_environments)
    tools = blocking(_A.tools)
    splits = blocking(_A.splits)
    tasks = blocking(_A.tasks)
    num_tasks = blocking(_A.num_tasks)
    task = blocking(_A.task)
    task_range = blocking(_A.task_range)
    create_session = blocking(_A.create_session)
    prompt = blocking(_A.prompt)
    messages = blocking(_A.messages)
    task_tools = blocking(_A.task_tools)
    call = blocking(_A.call)
    score_group = blocking(_A.score_group)
    delete_session = blocking(_A.delete_session)
    ping = blocking(_A.ping)
    probe = blocking(_A.probe)

    def close(self) -> None:
        """Tear down every open session and close the event loop; safe to call twice.

        The backend stays usable: the next call makes a new loop.
        """
        self.runtime.close(self.core.aclose() if self.core.open_sessions else None)

    def _forget_runtime(self) -> None:
        """In a forked child: the parent's sessions and loop are not ours to use or close."""
        self.runtime.abandon()
        self.core.forget_sessions()


_LIVE: weakref.WeakSet[LocalBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(_LIVE):
        backend._forget_runtime()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
