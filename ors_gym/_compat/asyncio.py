"""asyncio's running-loop marker: read it cheaply, and set it aside to run a second loop.

``LocalBackend`` runs its private loop in the calling thread, also when that
thread is already running a loop (Jupyter, ``asyncio.run``) and blocked in the
sync call anyway. asyncio refuses to start a loop while another is marked as
running in the thread; ``asyncio._set_running_loop`` (low level, meant for
event loop implementations) clears and restores the mark. Without it (outside
``VERIFIED``) running inside a running loop is refused with a clear error.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from types import TracebackType

from ors_gym._compat._versions import note_fallback

__all__ = ["VERIFIED", "get_running_loop_or_none", "running_loop_set_aside"]

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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._outer is not None:
            asyncio._set_running_loop(self._outer)


def running_loop_set_aside() -> _SetAside:
    """Clear this thread's running-loop mark for the ``with`` block, then restore it.

    ``with running_loop_set_aside() as outer:`` gives the loop that was set aside
    (None if there was none: then nothing is touched). Raises RuntimeError on
    entry if a loop is running and this Python offers no way to set it aside.
    """
    return _SetAside()
