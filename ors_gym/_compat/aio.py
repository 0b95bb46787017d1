"""Temporary: asyncio's running-loop marker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


def get_running_loop_or_none() -> asyncio.AbstractEventLoop | None:
    return asyncio._get_running_loop()


@contextmanager
def running_loop_set_aside() -> Iterator[None]:
    outer = asyncio._get_running_loop()
    if outer is not None:
        asyncio._set_running_loop(None)
    try:
        yield
    finally:
        if outer is not None:
            asyncio._set_running_loop(outer)
