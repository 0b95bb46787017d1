"""Strings that match a JSON Schema ``pattern``, drawn from the regex's parse tree.

Python's own regex parser (reached through ``ors_gym._compat.re``) turns the
pattern into a tree of literals, classes, branches and repeats; walking it with
a random generator gives candidate strings. The walk is best effort (anchors
and lookarounds emit nothing, repeats are capped), so every candidate is
checked with ``re.search`` and a known-good string stands in when a few draws
in a row miss. Where the parser is unavailable, the schema's ``default`` and
``examples`` are the known-good strings drawn.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ors_gym._compat.re import parse_tree
from ors_gym.schema.resolve import SchemaError

__all__ = ["pattern_sampler"]

_CATEGORIES = {
    "CATEGORY_DIGIT": string.digits,
    "CATEGORY_NOT_DIGIT": string.ascii_letters + " -_",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": string.ascii_letters + string.digits,
    "CATEGORY_WORD": string.ascii_letters + string.digits + "_",
    "CATEGORY_NOT_WORD": " -.,",
}
_PRINTABLE = string.ascii_letters + string.digits + " -_.,:;!?/"
_DRAWS = 10  # candidates tried per sample before a known-good string stands in
_PROBES = 50  # candidates tried at compile time to find a known-good string


def pattern_sampler(
    pattern: str, lo: int, hi: int, schema: Mapping[str, Any]
) -> Callable[[np.random.Generator, int], str]:
    """A ``(rng, depth) -> str`` sampler of strings matching ``pattern`` (search semantics)
    with length in ``[lo, hi]``; ``schema``'s ``default`` and ``examples`` serve as
    fallbacks. Raises :class:`SchemaError` when no matching string can be found."""
    try:
        regex = re.compile(pattern)
        parsed = parse_tree(pattern)
    except Exception as exc:  # re.error, or a parser quirk
        raise SchemaError(f"cannot use pattern {pattern!r}: {exc}") from None

    def ok(value: Any) -> bool:
        return isinstance(value, str) and lo <= len(value) <= hi and bool(regex.search(value))

    fallbacks = [v for v in [schema.get("default"), *(schema.get("examples") or ())] if ok(v)]
    probe = np.random.default_rng(0)
    for _ in range(_PROBES if parsed is not None else 0):
        value = _regex_sample(parsed, probe)
        if ok(value):
            fallbacks.append(value)
            break
    if not fallbacks:
        hint = "" if parsed is not None else (
            " (this Python's regex parser is not available to ors_gym: give the schema a "
            "'default' or 'examples' that match)"
        )
        raise SchemaError(f"cannot generate strings matching pattern {pattern!r}{hint}")

    def sample_pattern(rng: np.random.Generator, depth: int) -> str:
        for _ in range(_DRAWS if parsed is not None else 0):
            value = _regex_sample(parsed, rng)
            if ok(value):
                return value
        return str(fallbacks[int(rng.integers(len(fallbacks)))])

    return sample_pattern


def _regex_sample(
    parsed: Any, rng: np.random.Generator, groups: dict[int, str] | None = None
) -> str:
    """A random string produced by an ``re`` parse tree (best effort; the caller checks it)."""
    groups = {} if groups is None else groups
    out: list[str] = []
    for op, av in parsed:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(av))
        elif name == "NOT_LITERAL":
            pool = _PRINTABLE.replace(chr(av), "")
            out.append(pool[int(rng.integers(len(pool)))])
        elif name == "ANY":
            out.append(_PRINTABLE[int(rng.integers(len(_PRINTABLE)))])
        elif name == "IN":
            out.append(_regex_class(av, rng))
        elif name == "BRANCH":
            options = av[1]
            out.append(_regex_sample(options[int(rng.integers(len(options)))], rng, groups))
        elif name == "SUBPATTERN":
            text = _regex_sample(av[-1], rng, groups)
            if av[0] is not None:
                groups[av[0]] = text
            out.append(text)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = av
            high = min(high, low + 3) if isinstance(high, int) else low + 3
            for _ in range(int(rng.integers(low, high, endpoint=True))):
                out.append(_regex_sample(sub, rng, groups))
        elif name == "GROUPREF":
            out.append(groups.get(av, ""))
        elif name == "ATOMIC_GROUP":
            out.append(_regex_sample(av, rng, groups))
        # AT (anchors), ASSERT, ASSERT_NOT, GROUPREF_EXISTS: emit nothing
    return "".join(out)


def _regex_class(items: Any, rng: np.random.Generator) -> str:
    """One character of a ``[...]`` class (ranges capped at 200 characters)."""
    chars: list[str] = []
    negate = False
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            chars.append(chr(av))
        elif name == "RANGE":
            low, high = av
            chars.extend(chr(c) for c in range(low, min(high, low + 200) + 1))
        elif name == "CATEGORY":
            chars.extend(_CATEGORIES.get(str(av), ""))
    if negate:
        banned = set(chars)
        pool = [c for c in _PRINTABLE if c not in banned] or ["~"]
        return pool[int(rng.integers(len(pool)))]
    return chars[int(rng.integers(len(chars)))] if chars else ""
