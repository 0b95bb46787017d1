"""Python's own regex parser, for the parse tree that matching strings are drawn from.

The standard library has no public regex parser; ``re._parser.parse`` (the
one ``re.compile`` uses) turns a pattern into a tree of literals, classes,
branches and repeats, which ``ors_gym.schema.regex`` walks to draw candidate
strings. Inside ``VERIFIED`` :func:`parse_tree` returns that tree; outside it
returns None (noted once at DEBUG) and a schema's ``default`` and ``examples``
are the only strings drawn: a capability lost, never a wrong answer, as every
candidate is checked with ``re.search`` anyway.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ors_gym._compat._versions import note_fallback

__all__ = ["VERIFIED", "parse_tree"]

#: Python versions whose ``re._parser`` (its ``parse`` and tree shape) is used as here.
VERIFIED = ((3, 11), (3, 15))


def _private_parser() -> Any | None:
    if not VERIFIED[0] <= sys.version_info[:2] < VERIFIED[1]:
        return None
    try:
        parser = importlib.import_module("re._parser")
    except ImportError:
        return None
    return parser if callable(getattr(parser, "parse", None)) else None


_PARSER = _private_parser()


def parse_tree(pattern: str) -> Any | None:
    """The parse tree of ``pattern`` (``re._parser.parse``), or None outside ``VERIFIED``.

    Raises ``re.error`` for a pattern the parser rejects, as ``re.compile`` would.
    """
    if _PARSER is None:
        note_fallback(
            "re._parser.parse",
            f"Python {sys.version_info[0]}.{sys.version_info[1]} is outside the verified "
            f"range {VERIFIED} or lacks it; patterns draw only from default/examples",
        )
        return None
    return _PARSER.parse(pattern)
