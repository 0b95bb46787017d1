"""A private event loop for the blocking face of an async backend.

``LoopRunner.run(coro)`` runs a coroutine to completion on ONE loop owned by
the runner (never one per call), driven by the calling thread itself: one
loop pass for a coroutine that never waits, no thread hop. When several
threads call at once, one drives while the others hand their coroutine to the
running loop and wait; whoever finds the loop idle takes over, so calls from
many threads run concurrently on one loop. A thread already running a loop of
its own (Jupyter, ``asyncio.run``) is blocked for the duration of a blocking
call anyway, so the private loop runs there too, with that thread's
running-loop marker set aside and restored. Between calls the loop is idle.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from ors_gym._compat.asyncio import get_running_loop_or_none, running_loop_set_aside

__all__ = ["LoopRunner", "blocking", "finish_loop"]

logger = logging.getLogger("ors_gym")

_T = TypeVar("_T")

#: Loops inherited through fork: never closed in the child (their executor locks
#: and file descriptors belong to the parent's threads), never collected.
_ABANDONED: list[asyncio.AbstractEventLoop] = []


class LoopRunner:
    """One private event loop, driven by whichever calling thread finds it idle.

    ``_drive`` is held by the thread running the loop. A thread that finds it
    held hands its coroutine to the running loop and waits on ``_cond`` for
    the result, or for the loop to come free, to drive it itself. The common,
    uncontended call costs one non-blocking lock acquire and release.
    """

    def __init__(self) -> None:
        self._drive = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0  # threads in _join; a releasing driver notifies only if any
        self._loop: asyncio.AbstractEventLoop | None = None

    def abandon(self) -> None:
        """Forget the loop without touching it (in a forked child)."""
        if self._loop is not None:
            _ABANDONED.append(self._loop)
        self.__init__()  # type: ignore[misc]

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the private loop from any thread; returns its result."""
        outer = get_running_loop_or_none()
        loop = self._loop
        if loop is None:
            loop = self._new_loop()
        if outer is loop:
            coro.close()
            raise RuntimeError(
                "a blocking backend was called from inside one of the "
                "environments it hosts (a tool, setup() or prompt), which would deadlock; "
                "environments must not call the backend that hosts them"
            )
        if self._drive.acquire(False):
            try:
                return _run_on(loop, coro)
            finally:
                self._release()
        return self._join(loop, coro)

    def _new_loop(self) -> asyncio.AbstractEventLoop:
        with self._cond:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop

    def _release(self) -> None:
        # Release first, then look for waiters; a waiter counts itself first, then tries
        # the lock: so either it gets the lock or this sees it and wakes it.
        self._drive.release()
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def _join(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _T]) -> _T:
        # Another thread is driving: hand the coroutine to the running loop, and take
        # over the driving if that thread finishes first.
        done = asyncio.run_coroutine_threadsafe(coro, loop)
        done.add_done_callback(self._wake)
        take_over = False
        with self._cond:
            self._waiting += 1
            try:
                while not done.done() and not (take_over := self._drive.acquire(False)):
                    self._cond.wait()
            finally:
                self._waiting -= 1
        if not done.done():
            try:
                _run_on(loop, asyncio.wrap_future(done, loop=loop))
            finally:
                self._release()
        elif take_over:
            self._release()
        return done.result()

    def _wake(self, _: object) -> None:
        with self._cond:
            self._cond.notify_all()

    def close(self, final: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``final``, cancel what is left, and close the loop; reusable afterwards.

        Waits for calls other threads have in flight.
        """
        loop = self._loop
        outer = get_running_loop_or_none()
        if loop is None or outer is loop:
            if final is not None:
                final.close()
            if loop is not None:
                raise RuntimeError(
                    "a blocking backend was closed from inside one of the environments it hosts"
                )
            return
        self._drive.acquire()
        try:
            with running_loop_set_aside():
                try:
                    if final is not None:
                        loop.run_until_complete(final)
                finally:
                    finish_loop(loop)
        finally:
            self._loop = None
            self._release()


def _run_on(loop: asyncio.AbstractEventLoop, aw: Awaitable[_T]) -> _T:
    """Run ``aw`` on ``loop`` in this thread (which holds the loop's drive lock)."""
    # A thread running its own loop is blocked in this call anyway: run ours there,
    # with its running-loop marker set aside (asyncio refuses to nest otherwise).
    with running_loop_set_aside():
        if not asyncio.iscoroutine(aw):
            return loop.run_until_complete(aw)
        # One loop pass runs the task's first step, then the stop queued behind it:
        # a call that never waits (most tool calls) costs one pass instead of the two
        # run_until_complete makes (the second only runs its done-callback). A call
        # that waits is carried on to completion.
        task = loop.create_task(aw)
        loop.call_soon(loop.stop)
        loop.run_forever()
        if not task.done():
            return loop.run_until_complete(task)
        return task.result()


def finish_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What ``asyncio.run`` does on the way out: cancel tasks, flush generators and threads."""
    try:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        except RuntimeError as exc:  # no new thread to wait in while the interpreter exits
            logger.debug("default executor not shut down: %s", exc)
    finally:
        loop.close()


_P = ParamSpec("_P")


class _Driven(Protocol):
    """A blocking face: an async backend (``core``) and the runner that drives it."""

    core: Any
    runner: LoopRunner


def blocking(
    method: Callable[Concatenate[Any, _P], Coroutine[Any, Any, _T]],
) -> Callable[Concatenate[_Driven, _P], _T]:
    """The blocking twin of an async backend method: run it on the face's private loop."""

    @functools.wraps(method)
    def run(self: _Driven, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self.runner.run(method(self.core, *args, **kwargs))

    return run
