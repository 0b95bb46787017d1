"""httpcore: an HTTP/1.1 connection's state lock, made an ``asyncio.Lock``.

``httpcore.AsyncHTTP11Connection`` guards its state (new, active, idle,
closed) with its private ``_state_lock``, an httpcore ``AsyncLock`` that on
asyncio is an anyio ``Lock``: each acquisition passes once through the event
loop (a shielded checkpoint) even when nothing holds it, twice per request.
``_http11.Http11Pool`` gives a connection to one request at a time, so the
lock is never contended; an ``asyncio.Lock`` guards the same state and takes
a free lock without leaving the task. Outside ``VERIFIED`` (or with the
attribute gone) the connection keeps its own lock.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ors_gym._compat._versions import note_fallback, version_of, within

__all__ = ["VERIFIED", "lean_state_lock"]

#: httpcore releases whose AsyncHTTP11Connection was read and found as used here:
#: ``_state_lock`` made in ``__init__``, only ever entered with ``async with``.
VERIFIED = ((1, 0, 5), (1, 1))

_PRIVATE = within("httpcore", *VERIFIED)


def lean_state_lock(connection: Any) -> bool:
    """Give a new ``httpcore.AsyncHTTP11Connection`` an ``asyncio.Lock`` as its state
    lock; True if it was replaced, False (the connection unchanged) on the public path."""
    if _PRIVATE and hasattr(connection, "_state_lock"):
        connection._state_lock = asyncio.Lock()
        return True
    note_fallback(
        "httpcore AsyncHTTP11Connection._state_lock",
        f"httpcore {version_of('httpcore')} is outside the verified range {VERIFIED} or "
        "its connections have no _state_lock; each request passes twice more through the loop",
    )
    return False
