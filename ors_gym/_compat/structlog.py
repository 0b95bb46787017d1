"""structlog: an SDK logger rebuilt to filter at another level.

``make_filtering_bound_logger(level)`` makes a class per level; a logger
already made keeps its level for good. To change it, a logger of the new class
is made over the old one's sink, processors and bound context, which structlog
keeps in the private ``_logger``, ``_processors`` and ``_context`` of
``BoundLoggerBase``. There is no public way to read the first two: outside the
verified range the logger is left as it is.
"""

from __future__ import annotations

from typing import Any

from ors_gym._compat._versions import note_fallback, version_of, within

__all__ = ["VERIFIED", "is_filtering_logger", "refiltered"]

#: structlog releases whose BoundLoggerBase keeps (_logger, _processors, _context).
VERIFIED = ((24, 1), (27,))


def is_filtering_logger(value: object) -> bool:
    """Whether ``value`` is a logger ``make_filtering_bound_logger`` built (not a lazy proxy)."""
    return type(value).__name__.startswith("BoundLoggerFilteringAt")


def refiltered(logger: Any, level: int) -> Any | None:
    """``logger`` filtering at ``level``, with the same sink, processors and context.

    None when it cannot be rebuilt: structlog outside ``VERIFIED``, or
    ``logger`` only looks like a structlog logger.
    """
    if not within("structlog", *VERIFIED):
        note_fallback(
            "structlog BoundLoggerBase._logger/_processors/_context",
            f"structlog {version_of('structlog')} is outside the verified range {VERIFIED}; "
            "SDK loggers keep the level they were made with",
        )
        return None
    try:
        from structlog import make_filtering_bound_logger
    except ImportError:  # pragma: no cover - the SDK depends on structlog
        return None
    try:
        wrapper: Any = make_filtering_bound_logger(level)
        return wrapper(logger._logger, logger._processors, logger._context)
    except Exception:  # a look-alike that is not a structlog logger
        return None
