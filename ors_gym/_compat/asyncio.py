"""asyncio's running-loop marker, and a task's first step run at once in the calling thread.

``LocalBackend`` runs its private loop in the calling thread, also when that
thread is already running a loop (Jupyter, ``asyncio.run``) and blocked in the
sync call anyway. asyncio refuses to start a loop while another is marked as
running in the thread; ``asyncio._set_running_loop`` (low level, meant for
event loop implementations) clears and restores the mark. Without it (outside
``VERIFIED``) running inside a running loop is refused with a clear error.

``Runtime.run`` starts a coroutine as a task whose first step runs at once in
the calling thread, as Python 3.12's eager tasks do inside a running loop: a
call that never waits then costs no loop pass (``run_forever``, a selector
poll). ``run_first_step`` takes the first step a new ``Task`` schedules
through its loop's ``call_soon`` (as the task classes of every verified
Python do), shadowing that method on the loop for the task's construction
only, and runs it with the loop marked running and its async generator hooks
set, as a loop pass would; elsewhere the step is scheduled as usual and the
caller runs the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ors_gym._compat._versions import note_fallback

__all__ = ["VERIFIED", "get_running_loop_or_none", "run_first_step", "running_loop_set_aside"]

_T = TypeVar("_T")

#: Python versions whose asyncio has _get_running_loop and _set_running_loop as used here.
VERIFIED = ((3, 11), (3, 15))

_PRIVATE = (
    VERIFIED[0] <= sys.version_info[:2] < VERIFIED[1]
    and callable(getattr(asyncio, "_get_running_loop", None))
    and callable(getattr(asyncio, "_set_running_loop", None))
)
_WHY = (
    f"Python {sys.version_info[0]}.{sys.version_info[1]} is outside the verified range "
    f"{VERIFIED} or lacks it"
)


def _public_get_running_loop() -> asyncio.AbstractEventLoop | None:
    note_fallback("asyncio._get_running_loop", _WHY)
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


#: The loop running in this thread, or None (``asyncio._get_running_loop`` when verified).
get_running_loop_or_none: Callable[[], asyncio.AbstractEventLoop | None] = (
    asyncio._get_running_loop if _PRIVATE else _public_get_running_loop
)


class _SetAside:
    """The context manager ``running_loop_set_aside()`` returns."""

    __slots__ = ("_outer",)

    def __enter__(self) -> asyncio.AbstractEventLoop | None:
        outer = self._outer = get_running_loop_or_none()
        if outer is not None:
            if not _PRIVATE:
                note_fallback("asyncio._set_running_loop", _WHY)
                raise RuntimeError(
                    "cannot run a second event loop in a thread that is running one on "
                    "this Python (asyncio._set_running_loop is not available); make the "
                    "call from another thread, e.g. with asyncio.to_thread"
                )
            asyncio._set_running_loop(None)
        return outer

    def __exit__(self, *exc_info: object) -> None:
        if self._outer is not None:
            asyncio._set_running_loop(self._outer)


def running_loop_set_aside() -> _SetAside:
    """Clear this thread's running-loop mark for the ``with`` block, then restore it.

    ``with running_loop_set_aside() as outer:`` gives the loop that was set aside
    (None if there was none: then nothing is touched). Raises RuntimeError on
    entry if a loop is running and this Python offers no way to set it aside.
    """
    return _SetAside()



def run_first_step(loop: asyncio.AbstractEventLoop,
                   coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
    """A task of ``coro`` on ``loop`` (not running), its first step already run in this
    thread where the loop allows it; the caller runs the loop if it is not done.

    During that first step ``get_running_loop()`` and ``current_task()`` are the loop and
    the task, but ``loop.is_running()`` is False: the loop itself has not been started."""
    first_iter = getattr(loop, "_asyncgen_firstiter_hook", None)
    finalizer = getattr(loop, "_asyncgen_finalizer_hook", None)
    taken: list[tuple[Callable[..., Any], tuple[Any, ...], Any]] = []

    def take(callback: Callable[..., Any], *args: Any,
             context: contextvars.Context | None = None) -> None:
        taken.append((callback, args, context))

    if not _PRIVATE or first_iter is None or finalizer is None:
        return asyncio.Task(coro, loop=loop)
    try:
        loop.call_soon = take  # type: ignore[method-assign,assignment]
    except AttributeError:  # a loop without an instance dict (uvloop's)
        return asyncio.Task(coro, loop=loop)
    try:
        task = asyncio.Task(coro, loop=loop)
    finally:
        del loop.call_soon
    if len(taken) != 1:  # not the one first step expected: schedule what was asked
        for callback, args, context in taken:
            loop.call_soon(callback, *args, context=context)
        return task
    step, args, context = taken[0]
    hooks = sys.get_asyncgen_hooks()
    sys.set_asyncgen_hooks(first_iter, finalizer)  # (firstiter, finalizer): positional is cheaper
    asyncio._set_running_loop(loop)
    try:
        if context is None:
            step(*args)
        else:
            context.run(step, *args)
    finally:
        asyncio._set_running_loop(None)
        sys.set_asyncgen_hooks(*hooks)
    return task
