"""Samplers for the scalar JSON types: integer, number and string.

Each function reads one flat schema's bounds once and returns a
``(rng, depth) -> value`` closure. Unbounded sides get a modest range (values
stay readable in logs and small on the wire); bounds are drawn now and then on
purpose, since off-by-one mistakes live there. Strings are mostly ASCII with
about one character in seven outside it, so encodings get exercised.
"""

from __future__ import annotations

import base64
import json
import math
import string
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ors_gym.schema.regex import pattern_sampler
from ors_gym.schema.resolve import SchemaError, is_num

__all__ = [
    "Node",
    "int_bounds",
    "integer_sampler",
    "number_bounds",
    "number_sampler",
    "string_sampler",
]

#: A compiled schema node: ``(rng, depth) -> value``; ``depth`` is the nesting level.
Node = Callable[[np.random.Generator, int], Any]

_UNBOUNDED = 100  # an unbounded number is drawn from [-100, 100]
_INT_LIMIT = 2**62
_EDGE_PROB = 0.05  # how often each bound itself is drawn
_MAX_EXTRA_CHARS = 16  # strings without maxLength get at most minLength + this

_ASCII = string.ascii_letters + string.digits + " .,:;!?-_'()/@#%&*+="
_NON_ASCII = "éèüößçñøåÆЖжΩπλ中文字日本語한국€£¥°±µ😀🙂🚀"
# Mostly ASCII, about one character in seven non-ASCII.
_TEXT_POOL = np.array(list(_ASCII * 2 + _NON_ASCII))

Bound = int | float | None


def number_bounds(schema: Mapping[str, Any]) -> tuple[Bound, Bound, Bound, Bound]:
    """``(minimum, exclusiveMinimum, maximum, exclusiveMaximum)``, each a number or None.

    Draft 4's boolean form (``"exclusiveMinimum": true`` beside ``minimum``) is
    read as the later numeric form.
    """
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    ex_min, ex_max = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if ex_min is True and is_num(minimum):
        ex_min, minimum = minimum, None
    if ex_max is True and is_num(maximum):
        ex_max, maximum = maximum, None
    minimum, ex_min, maximum, ex_max = (
        v if is_num(v) else None for v in (minimum, ex_min, maximum, ex_max)
    )
    return minimum, ex_min, maximum, ex_max


def int_bounds(schema: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The inclusive integer range ``schema``'s bounds allow (None for an open side)."""
    minimum, ex_min, maximum, ex_max = number_bounds(schema)
    lows = [math.ceil(minimum)] if minimum is not None else []
    if ex_min is not None:
        lows.append(math.floor(ex_min) + 1)
    highs = [math.floor(maximum)] if maximum is not None else []
    if ex_max is not None:
        highs.append(math.ceil(ex_max) - 1)
    return (max(lows) if lows else None), (min(highs) if highs else None)


def _clamp_range(lo: int | None, hi: int | None) -> tuple[int, int]:
    """Finite sampling bounds: unbounded sides get a modest range around the other."""
    if lo is None and hi is None:
        lo, hi = -_UNBOUNDED, _UNBOUNDED
    elif lo is None:
        assert hi is not None
        lo = hi - 2 * _UNBOUNDED
    elif hi is None:
        hi = lo + 2 * _UNBOUNDED
    return max(lo, -_INT_LIMIT), min(hi, _INT_LIMIT)


def integer_sampler(schema: Mapping[str, Any]) -> Node:
    """Integers within the bounds, multiples of an integral ``multipleOf``."""
    lo, hi = _clamp_range(*int_bounds(schema))
    step = schema.get("multipleOf")
    if is_num(step) and step > 0:
        if float(step).is_integer():
            step = int(step)
            lo, hi = -(-lo // step), hi // step  # sample k, return k * step
        elif not (1 / step).is_integer():
            raise SchemaError(f"integer multipleOf {step!r} is not supported")
        else:
            step = 1
    else:
        step = 1
    if lo > hi:
        raise SchemaError(f"no integer satisfies the bounds of {dict(schema)!r}")

    def sample_integer(rng: np.random.Generator, depth: int) -> int:
        roll = rng.random()
        if roll < _EDGE_PROB:
            k = lo
        elif roll < 2 * _EDGE_PROB:
            k = hi
        else:
            k = int(rng.integers(lo, hi, endpoint=True))
        return int(k * step)

    return sample_integer


def number_sampler(schema: Mapping[str, Any]) -> Node:
    """Floats within the bounds (exclusive bounds by the next float), or multiples of
    ``multipleOf`` (integers when the step is integral)."""
    minimum, ex_min, maximum, ex_max = number_bounds(schema)
    lows = [float(minimum)] if minimum is not None else []
    if ex_min is not None:
        lows.append(float(np.nextafter(float(ex_min), math.inf)))
    highs = [float(maximum)] if maximum is not None else []
    if ex_max is not None:
        highs.append(float(np.nextafter(float(ex_max), -math.inf)))
    lo = max(lows) if lows else None
    hi = min(highs) if highs else None
    if lo is None and hi is None:
        lo, hi = -float(_UNBOUNDED), float(_UNBOUNDED)
    elif lo is None:
        assert hi is not None
        lo = hi - 2 * _UNBOUNDED
    elif hi is None:
        hi = lo + 2 * _UNBOUNDED
    if lo > hi or not (math.isfinite(lo) and math.isfinite(hi)):
        raise SchemaError(f"no number satisfies the bounds of {dict(schema)!r}")
    step = schema.get("multipleOf")
    if is_num(step) and step > 0:
        k_lo, k_hi = math.ceil(lo / step), math.floor(hi / step)
        if k_lo > k_hi:
            raise SchemaError(f"no multiple of {step} lies within the bounds of {dict(schema)!r}")
        integral = float(step).is_integer()

        def sample_multiple(rng: np.random.Generator, depth: int) -> float | int:
            k = int(rng.integers(k_lo, k_hi, endpoint=True))
            return int(k * step) if integral else float(k * step)

        return sample_multiple
    span_lo, span_hi = lo, hi

    def sample_number(rng: np.random.Generator, depth: int) -> float:
        roll = rng.random()
        if roll < _EDGE_PROB:
            return span_lo
        if roll < 2 * _EDGE_PROB:
            return span_hi
        u = rng.random()
        value = span_lo * (1.0 - u) + span_hi * u  # no overflow for huge spans
        return min(max(value, span_lo), span_hi)

    return sample_number


def _text(rng: np.random.Generator, n: int) -> str:
    return "".join(_TEXT_POOL[rng.integers(len(_TEXT_POOL), size=n)]) if n else ""


def _fmt_datetime(rng: np.random.Generator) -> str:
    y, mo, d = int(rng.integers(1990, 2040)), int(rng.integers(1, 13)), int(rng.integers(1, 29))
    h, mi, s = int(rng.integers(24)), int(rng.integers(60)), int(rng.integers(60))
    return f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z"


_FORMATS: dict[str, Callable[[np.random.Generator], str]] = {
    "date-time": _fmt_datetime,
    "date": lambda rng: _fmt_datetime(rng)[:10],
    "time": lambda rng: _fmt_datetime(rng)[11:19],
    "duration": lambda rng: f"PT{int(rng.integers(0, 10_000))}S",
    "email": lambda rng: f"user{int(rng.integers(10_000))}@example.com",
    "idn-email": lambda rng: f"user{int(rng.integers(10_000))}@example.com",
    "uri": lambda rng: f"https://example.com/p{int(rng.integers(10_000))}",
    "url": lambda rng: f"https://example.com/p{int(rng.integers(10_000))}",
    "iri": lambda rng: f"https://example.com/p{int(rng.integers(10_000))}",
    "uri-reference": lambda rng: f"/p{int(rng.integers(10_000))}",
    "hostname": lambda rng: f"host{int(rng.integers(10_000))}.example.com",
    "ipv4": lambda rng: ".".join(str(int(v)) for v in rng.integers(0, 256, size=4)),
    "ipv6": lambda rng: ":".join(f"{int(v):x}" for v in rng.integers(0, 65536, size=8)),
    "uuid": lambda rng: str(uuid.UUID(bytes=rng.bytes(16), version=4)),
    "base64": lambda rng: base64.b64encode(rng.bytes(int(rng.integers(0, 12)))).decode(),
    "json-string": lambda rng: json.dumps(int(rng.integers(-100, 100))),
}


def string_sampler(schema: Mapping[str, Any]) -> Node:
    """Strings within the length bounds, matching ``pattern`` or shaped like ``format``."""
    lo = int(schema.get("minLength", 0))
    hi = int(schema.get("maxLength", lo + _MAX_EXTRA_CHARS))
    hi = min(hi, lo + _MAX_EXTRA_CHARS)
    if lo > hi:
        raise SchemaError(f"string needs minLength {lo} but maxLength is {hi}")
    pattern = schema.get("pattern")
    fmt = _FORMATS.get(schema.get("format", ""))
    if isinstance(pattern, str):
        return pattern_sampler(pattern, lo, int(schema.get("maxLength", 10**9)), schema)
    if fmt is not None:
        fmt_fn = fmt
        max_len = int(schema.get("maxLength", 10**9))

        def sample_format(rng: np.random.Generator, depth: int) -> str:
            value = fmt_fn(rng)
            if lo <= len(value) <= max_len:
                return value
            return _text(rng, int(rng.integers(lo, hi, endpoint=True)))

        return sample_format

    def sample_string(rng: np.random.Generator, depth: int) -> str:
        return _text(rng, int(rng.integers(lo, hi, endpoint=True)))

    return sample_string
