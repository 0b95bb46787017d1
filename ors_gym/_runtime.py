"""``Runtime``: the one way blocking code runs ors_gym's async core.

A runtime owns ONE private event loop (never one per call). Two kinds of
thread drive it:

- **A caller**: ``run(coro)`` runs the coroutine on the loop in the calling
  thread itself, its first step at once (``_compat.asyncio.run_first_step``),
  so a call that never waits costs no loop pass and no thread hop. When
  several threads call at once, one drives while the others hand their
  coroutine to the running loop and wait; whoever finds the loop idle takes
  over. A thread already running a loop of its own (Jupyter,
  ``asyncio.run``) is blocked for the duration of a blocking call anyway, so
  the private loop runs there too, with that thread's running-loop marker set
  aside and restored.
- **The background driver**, a daemon thread, for work that must go on while
  no caller drives: the keepalive pings of open HTTP sessions while the policy
  thinks, the vector env's pipelined ``send``, deletions it left behind.
  When a caller leaves tasks pending on the loop, it takes over after
  ``IDLE_GRACE_S`` without a call, so back-to-back calls never hop threads
  (at once after ``drive_in_background``), and it stops driving once no task
  is left. A
  caller that arrives while it drives hands its coroutine over and asks it to
  stop, so the next call is driven by the caller again.

Forked children abandon inherited loops (their file descriptors and executor
locks belong to the parent's threads) and make new ones on first use.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, Concatenate, ParamSpec, TypeVar

from ors_gym._compat.asyncio import (
    get_running_loop_or_none,
    run_first_step,
    running_loop_set_aside,
)

__all__ = ["IDLE_GRACE_S", "Runtime", "after_fork_in_child", "blocking", "finish_loop"]

logger = logging.getLogger("ors_gym")

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: Seconds the loop may sit undriven with tasks pending before the background driver
#: takes over (calls closer together than this never leave the caller's thread).
IDLE_GRACE_S = 0.05
#: While the background driver drives, how often it looks whether any task is left.
_IDLE_CHECK_S = 1.0

#: Seconds the background driver thread waits for work before it ends (made again later).
_DRIVER_LINGER_S = 5.0

#: Loops inherited through fork: never closed in the child, never collected.
_ABANDONED: list[asyncio.AbstractEventLoop] = []


class Runtime:
    """One private event loop, driven by a calling thread or by the background driver.

    ``_drive`` is held by the thread running the loop. The common, uncontended
    call costs one non-blocking lock acquire and release.
    """

    def __init__(self, name: str = "ors-gym") -> None:
        self.name = name
        self._drive = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0  # threads in _join; a releasing driver notifies only if any
        self._loop: asyncio.AbstractEventLoop | None = None
        self._driver: threading.Thread | None = None
        self._kicked = False  # drive_in_background was asked: the driver starts at once
        self._idle_since: float | None = None  # tasks left pending by a caller, since
        self._background = False  # the driver is inside run_forever (read on the loop)
        self._closing = False
        self._check: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()  # the loop's unfinished tasks
        _LIVE.add(self)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The private loop (made on first use)."""
        loop = self._loop
        if loop is None:
            with self._cond:
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                    self._loop.set_task_factory(self._track)
                loop = self._loop
        return loop

    def _track(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        # The loop's task factory: the tasks other than the callers' own (which _run_on
        # makes directly), counted without asking asyncio (all_tasks walks every loop's
        # tasks), so a release knows cheaply whether background work is left.
        task = asyncio.Task(coro, loop=loop, **kwargs)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _pending(self) -> bool:
        # A finished task leaves the set by a callback the loop may not have run yet.
        return bool(self._tasks) and any(not task.done() for task in list(self._tasks))

    def run(self, coro: Coroutine[Any, Any, _T], *, leave_driver: bool = False) -> _T:
        """Run ``coro`` on the private loop from any thread; returns its result.

        ``leave_driver``: if the background driver is driving, hand ``coro`` to it and
        wait, rather than asking it to stop (work that goes on in the background).
        """
        loop = self._loop
        if loop is None:
            loop = self.loop
        outer = get_running_loop_or_none()
        if outer is loop:
            coro.close()
            raise RuntimeError(
                "ors_gym's blocking face was called from its own event loop (from inside "
                "an environment it hosts: a tool, setup() or prompt; or a callback of its "
                "own), which would deadlock; environments must not call the backend that "
                "hosts them"
            )
        if self._drive.acquire(False):
            try:
                if outer is None and type(coro) is CoroutineType:
                    # The usual call: no loop of the thread's own to set aside.
                    task = run_first_step(loop, coro)
                    return task.result() if task.done() else loop.run_until_complete(task)
                return _run_on(loop, coro)
            finally:
                self._release()
        return self._join(loop, coro, stop_background=not leave_driver)

    def drive_in_background(self) -> None:
        """Have the background driver drive the tasks left pending at once, rather than
        after ``IDLE_GRACE_S`` (work a caller started that must go on while it is away)."""
        with self._cond:
            self._kicked = True
            self._ensure_driver()
            self._cond.notify_all()

    def close(self, final: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``final``, cancel what is left, close the loop; reusable afterwards.

        Waits for calls other threads have in flight.
        """
        loop = self._loop
        if loop is None or get_running_loop_or_none() is loop:
            if final is not None:
                final.close()
            if loop is not None:
                raise RuntimeError("ors_gym's blocking face was closed from its own event loop")
            return
        self._closing = True
        self._stop_background(loop)
        self._drive.acquire()
        try:
            with running_loop_set_aside():
                try:
                    if final is not None:
                        loop.run_until_complete(final)
                finally:
                    finish_loop(loop)
        finally:
            with self._cond:
                self._loop = None
                self._idle_since = None
                self._kicked = False
                self._closing = False
                self._cond.notify_all()  # the background driver, if any, ends
            self._release()

    def abandon(self) -> None:
        """Forget the loop and driver without touching them (in a forked child)."""
        if self._loop is not None:
            _ABANDONED.append(self._loop)
        self._drive = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0
        self._loop = None
        self._tasks = set()
        self._driver = None
        self._kicked = False
        self._idle_since = None
        self._background = False

    # -- callers ---------------------------------------------------------------------------
    def _release(self) -> None:
        # Release first, then look for waiters; a waiter counts itself first, then tries
        # the lock: so either it gets the lock or this sees it and wakes it.
        self._drive.release()
        loop = self._loop
        pending = loop is not None and bool(self._tasks) and not self._closing and self._pending()
        if self._waiting or pending:
            with self._cond:
                notify = self._waiting > 0
                if pending:
                    # A driver already counting down its grace period reads the new
                    # start when it wakes: waking it on every call would cost a switch.
                    notify = notify or self._idle_since is None
                    self._idle_since = time.monotonic()
                    self._ensure_driver()
                if notify:
                    self._cond.notify_all()

    def _join(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _T],
              stop_background: bool = True) -> _T:
        # Another thread is driving: hand the coroutine to the running loop, and take
        # over the driving if that thread finishes first (the background driver is
        # asked to finish, unless told otherwise).
        done = asyncio.run_coroutine_threadsafe(coro, loop)
        done.add_done_callback(self._wake)
        if stop_background:
            self._stop_background(loop)
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

    # -- the background driver -------------------------------------------------------------
    def _ensure_driver(self) -> None:
        # Under _cond. One daemon thread per runtime, made when first needed.
        if self._driver is None or not self._driver.is_alive():
            self._driver = threading.Thread(
                target=_drive_in_background, args=(weakref.ref(self),),
                name=f"{self.name}-driver", daemon=True,
            )
            self._driver.start()

    def _stop_background(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._background:
            try:
                loop.call_soon_threadsafe(self._yield_loop, loop)
            except RuntimeError:  # closed meanwhile
                pass

    def _yield_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        # Runs on the loop: stops it only if the background driver is the one running it.
        if self._background:
            loop.stop()

    def _stop_if_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._background:
            return
        if self._pending():
            self._check = loop.call_later(_IDLE_CHECK_S, self._stop_if_idle, loop)
        else:
            loop.stop()

    def _wait_for_work(self) -> bool:
        """Block until the driver should try to drive; False once the runtime is gone."""
        with self._cond:
            while True:
                if self._loop is None:
                    return False  # closed (or never used): nothing to drive
                if self._kicked:
                    break
                if self._idle_since is not None:
                    left = self._idle_since + IDLE_GRACE_S - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                elif not self._cond.wait(_DRIVER_LINGER_S):
                    return False  # nothing for a long while: the driver thread ends
            self._kicked = False
            self._idle_since = None
            return True

    def _drive_once(self) -> None:
        """Drive the loop while work is pending and no caller wants it."""
        loop = self._loop
        if loop is None or self._closing:
            return
        if not self._drive.acquire(False):
            # A caller drives. It notes pending tasks when it releases; look again after
            # the grace period all the same.
            with self._cond:
                self._idle_since = time.monotonic()
            return
        try:
            if loop.is_closed():
                return
            self._background = True
            self._check = loop.call_later(_IDLE_CHECK_S, self._stop_if_idle, loop)
            try:
                loop.run_forever()
            finally:
                self._background = False
                self._check.cancel()
                self._check = None
        finally:
            self._release()


def _drive_in_background(ref: weakref.ref[Runtime]) -> None:
    # Holds the runtime weakly between rounds, so an unused runtime can be collected.
    while True:
        runtime = ref()
        if runtime is None or threading.current_thread() is not runtime._driver:
            return
        if not runtime._wait_for_work():
            with runtime._cond:
                if not runtime._kicked and runtime._idle_since is None:
                    runtime._driver = None
                    return
            continue
        try:
            runtime._drive_once()
        except Exception:  # never let the driver die with work queued
            logger.warning("ors_gym's background event loop driver failed", exc_info=True)
        del runtime


def _run_on(loop: asyncio.AbstractEventLoop, aw: Awaitable[_T]) -> _T:
    """Run ``aw`` on ``loop`` in this thread (which holds the loop's drive lock)."""
    # A thread running its own loop is blocked in this call anyway: run ours there,
    # with its running-loop marker set aside (asyncio refuses to nest otherwise).
    with running_loop_set_aside():
        if not asyncio.iscoroutine(aw):
            return loop.run_until_complete(aw)
        # The task's first step runs at once, here: a call that never waits costs no
        # loop pass. A call that waits is carried on to completion by the loop.
        task = run_first_step(loop, aw)  # not through the task factory: not background
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


_LIVE: weakref.WeakSet[Runtime] = weakref.WeakSet()
_FORK_HOOKS: list[Callable[[], None]] = []


def after_fork_in_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in a forked child, once every runtime has abandoned its loop.

    ors_gym's one at-fork registration: what else a child must forget (the sessions
    of the blocking backends) is a hook here, so each clean-up runs once, in order.
    """
    _FORK_HOOKS.append(hook)


def _after_fork_in_child() -> None:
    for runtime in list(_LIVE):
        runtime.abandon()
    for hook in _FORK_HOOKS:
        hook()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def blocking(
    method: Callable[Concatenate[Any, _P], Coroutine[Any, Any, _T]],
) -> Callable[Concatenate[Any, _P], _T]:
    """The blocking twin of an async method (typed as ``method``), for a blocking face:
    an object with ``core`` (the async object) and ``runtime`` (the :class:`Runtime` it
    runs on). It runs ``core``'s method of that name to its result on the runtime."""
    name = method.__name__

    @functools.wraps(method)
    def run(self: Any, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self.runtime.run(getattr(self.core, name)(*args, **kwargs))

    return run
