"""Installed versions against verified ranges, and the once-only note of a fallback."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re

__all__ = ["note_fallback", "release", "version_of", "within"]

logger = logging.getLogger("ors_gym")

_RELEASE = re.compile(r"\d+(?:\.\d+)*")
_noted: set[str] = set()


def release(text: str) -> tuple[int, ...]:
    """The leading release numbers of a version string: ``"2.3.6rc1"`` -> ``(2, 3, 6)``."""
    match = _RELEASE.match(text.strip())
    return tuple(int(part) for part in match.group().split(".")) if match else ()


@functools.cache
def version_of(distribution: str) -> tuple[int, ...] | None:
    """The installed ``distribution``'s release numbers; None if not installed (read once)."""
    try:
        return release(importlib.metadata.version(distribution))
    except importlib.metadata.PackageNotFoundError:
        return None


def within(distribution: str, low: tuple[int, ...], below: tuple[int, ...]) -> bool:
    """Whether the installed ``distribution`` is at least ``low`` and less than ``below``."""
    version = version_of(distribution)
    return version is not None and low <= version < below


def note_fallback(what: str, why: str) -> None:
    """Log at DEBUG, once per process for each ``what``, that its public path is taken."""
    if what in _noted:
        return
    _noted.add(what)
    logger.debug("%s: %s; taking the public path", what, why)
