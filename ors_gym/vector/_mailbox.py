"""The mailbox the vector env's results come back through, from its loop to the caller."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Mailbox"]


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
