"""The vector env's event loop thread, and the mailbox its results come back through.

Every sub-env's coroutine runs on ONE asyncio loop in a daemon thread; the
caller's thread submits work to it and waits for results in batches.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ors_gym.backends.local._loop import finish_loop

__all__ = ["LoopThread", "Mailbox"]

_T = TypeVar("_T")


class LoopThread:
    """An asyncio loop running forever in a daemon thread; other threads submit to it."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            finish_loop(self.loop)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the loop and wait for its result (from any other thread)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("OrsVectorEnv was called from its own event loop thread")
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("OrsVectorEnv is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=30)


class Mailbox:
    """Results handed from the loop thread to the caller, waking it once per batch.

    Waking the waiting thread for every finished sub-env would hand the GIL back
    and forth N times per step; instead ``take`` names how many it needs and
    ``put`` wakes it when that many have arrived.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self._want = 0
        self._ready = threading.Event()

    def put(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)
            if self._want and len(self._items) >= self._want:
                self._want = 0
                self._ready.set()

    def take(self, at_least: int, at_most: int, timeout: float | None = None) -> list[Any] | None:
        """Wait for ``at_least`` items, then take up to ``at_most`` in arrival order.

        None (and nothing taken) if ``timeout`` seconds pass first.
        """
        with self._lock:
            wait = len(self._items) < at_least
            if wait:
                self._want = at_least
                self._ready.clear()
        if wait and not self._ready.wait(timeout):
            with self._lock:
                if len(self._items) < at_least:
                    self._want = 0
                    return None
        with self._lock:
            taken, self._items = self._items[:at_most], self._items[at_most:]
        return taken

    def put_back(self, items: list[Any]) -> None:
        """Return taken items to the front, in their order (a wait that gave up)."""
        with self._lock:
            self._items[:0] = items
