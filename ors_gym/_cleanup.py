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
worker may be stopped at any moment. When it comes before ours (the usual
order: ``import ors_gym`` registers ours first), the job it schedules may be
taken by the worker; the exit hook then waits for every job scheduled and not
yet finished, counted from ``schedule`` to the job's end, so one in the
worker's hands (taken from the queue, still running) is waited for too.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from collections.abc import Callable

__all__ = ["flush", "schedule"]

logger = logging.getLogger("ors_gym")

#: Seconds the exit hook waits for cleanups the worker is running (each session deletion
#: has its own time bounds; this only keeps a hung one from holding the exit forever).
EXIT_WAIT_S = 60.0

_queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
_lock = threading.Lock()
_worker: threading.Thread | None = None
_unfinished = 0  # jobs scheduled and not yet run to the end (queued or running)
_done = threading.Condition(threading.Lock())
_exiting = False  # the atexit drain has run: later jobs run at once


def _run(job: Callable[[], None]) -> None:
    global _unfinished
    try:
        job()
    except Exception as exc:  # cleanup is best effort: never let it kill the worker
        logger.debug("deferred cleanup failed: %s", exc)
    finally:
        with _done:
            _unfinished -= 1
            _done.notify_all()


def _work() -> None:
    while True:
        job = _queue.get()
        if job is None:
            return
        _run(job)


def schedule(job: Callable[[], None]) -> None:
    """Run ``job`` soon on the cleanup thread (never in the caller's thread, except at exit)."""
    global _worker, _unfinished
    with _done:
        _unfinished += 1  # counted before it is queued: the exit hook never misses it
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
    """At exit, finish queued cleanups in this thread, then wait for the one the worker
    may be running (taken from the queue, so not found there)."""
    global _exiting
    _exiting = True
    while True:
        try:
            job = _queue.get_nowait()
        except queue.Empty:
            break
        if job is not None:
            _run(job)
    deadline = time.monotonic() + EXIT_WAIT_S
    with _done:
        while _unfinished > 0 and (left := deadline - time.monotonic()) > 0:
            _done.wait(left)
        if _unfinished > 0:
            logger.warning(
                "%d cleanup(s) still running after %s s at exit; the sessions they were "
                "deleting may outlive this process", _unfinished, EXIT_WAIT_S,
            )
