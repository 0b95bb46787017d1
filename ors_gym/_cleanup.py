"""Deferred cleanup for garbage-collected envs: a worker thread, drained at exit.

A forgotten env's finaliser may run inside the garbage collector, in any thread
and at any moment, even in a server's event loop thread or while the same
HTTP client holds its pool lock. Doing network I/O there can deadlock, so
finalisers only enqueue their cleanup here; one daemon thread runs it, and an
``atexit`` hook runs whatever is left when the interpreter exits.

``weakref.finalize`` runs live objects' finalisers at exit from its own
``atexit`` hook, which may come after ours (when some finalize object was
made before this module was imported): from then on ``schedule`` runs the
job at once when called in the exiting (main) thread, since the daemon
worker may be stopped at any moment.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
from collections.abc import Callable

__all__ = ["flush", "schedule"]

logger = logging.getLogger("ors_gym")

_queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
_lock = threading.Lock()
_worker: threading.Thread | None = None
_idle = threading.Event()
_idle.set()
_exiting = False  # the atexit drain has run: later jobs run at once


def _run(job: Callable[[], None]) -> None:
    try:
        job()
    except Exception as exc:  # cleanup is best effort: never let it kill the worker
        logger.debug("deferred cleanup failed: %s", exc)


def _work() -> None:
    while True:
        job = _queue.get()
        if job is None:
            return
        _idle.clear()
        _run(job)
        _idle.set()


def schedule(job: Callable[[], None]) -> None:
    """Run ``job`` soon on the cleanup thread (never in the caller's thread, except at exit)."""
    global _worker
    if _exiting and threading.current_thread() is threading.main_thread():
        _run(job)
        return
    with _lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="ors-gym-cleanup", daemon=True)
            _worker.start()
    _queue.put(job)


def flush(timeout: float = 30.0) -> bool:
    """Wait until every cleanup scheduled so far has run; False on timeout."""
    done = threading.Event()
    schedule(done.set)
    return done.wait(timeout)


@atexit.register
def _drain() -> None:
    """At exit, finish queued cleanups in this thread (the worker may be mid-job)."""
    global _exiting
    _exiting = True
    while True:
        try:
            job = _queue.get_nowait()
        except queue.Empty:
            break
        if job is not None:
            _run(job)
    _idle.wait(timeout=10)
