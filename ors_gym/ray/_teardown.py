"""How a rollout leaves no session behind: runs closed at exit, sessions deleted by the driver.

``track`` registers a run so that an ``atexit`` hook closes it if the program
ends with the run still open. The hook is registered at the first run, after
``import ray``, so it runs before Ray's own shutdown hook (``atexit`` runs
last-registered first). :class:`SessionDeleter` deletes sessions on ORS
servers from the driver process: those of episodes lost with their actor, and
every known one when a run is closed.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from typing import Any, Protocol

__all__ = ["SessionDeleter", "track", "untrack"]

logger = logging.getLogger("ors_gym")


class _Closable(Protocol):
    def close(self) -> None: ...


_OPEN_RUNS: weakref.WeakSet[_Closable] = weakref.WeakSet()
_HOOK = threading.Lock()
_hooked = False


def _close_open_runs() -> None:
    """At exit: end every run still open (registered after ``import ray``: runs first)."""
    for run in list(_OPEN_RUNS):
        try:
            run.close()
        except Exception as exc:  # best effort at exit
            logger.warning("closing a rollout at exit failed: %s", exc)


def track(run: _Closable) -> None:
    """Close ``run`` at exit unless it was closed (:func:`untrack`) before."""
    global _hooked
    with _HOOK:
        if not _hooked:
            atexit.register(_close_open_runs)
            _hooked = True
    _OPEN_RUNS.add(run)


def untrack(run: _Closable) -> None:
    """``run`` is closed: the exit hook leaves it alone."""
    _OPEN_RUNS.discard(run)


class SessionDeleter:
    """Deletes ORS sessions from this process: one ``HttpBackend`` per server, made on first use.

    ``max_retries=1`` and no keepalive: a deletion is one best-effort request.
    """

    def __init__(self, api_key: Any) -> None:
        self._api_key = api_key
        self._backends: dict[str, Any] = {}

    def delete(self, server: str, session: str) -> None:
        """Delete ``session`` on ``server`` (idempotent, best effort: a failure is logged)."""
        from ors_gym.backends.http import HttpBackend
        from ors_gym.errors import OrsError

        backend = self._backends.get(server)
        if backend is None:
            backend = self._backends[server] = HttpBackend(
                server, api_key=self._api_key, keepalive_interval=None, max_retries=1
            )
        try:
            backend.delete_session(session)
        except OrsError as exc:
            logger.warning("could not delete session %s on %s: %s", session, server, exc)

    def close(self) -> None:
        """Close the backends (a later ``delete`` makes new ones)."""
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()
