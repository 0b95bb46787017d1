"""Every value a parameter allows, when there are few: the basis of discrete tool actions.

``DiscreteToolActions`` numbers a tool's calls by taking the product of its
parameters' values; :func:`finite_choices` lists those values for one
parameter schema, or says (None) that there are too many to list.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ors_gym.schema.resolve import (
    ANNOTATIONS,
    FLATTEN_LIMIT,
    SchemaError,
    dedupe,
    flatten,
    is_num,
    merge,
    types_of,
)
from ors_gym.schema.scalars import int_bounds

__all__ = ["finite_choices"]


def finite_choices(schema: Any, root: Any = None, max_int_range: int = 16) -> list[Any] | None:
    """Every value ``schema`` allows, or None when there are too many to list.

    Finite: ``const``, ``enum`` (pydantic ``Literal`` and ``Enum``), boolean,
    null, integers with both bounds and at most ``max_int_range`` values, and
    ``anyOf``/``oneOf``/type lists whose branches are all finite (so
    ``Optional[Literal[...]]`` includes None). Order follows the schema;
    repeated values are listed once.
    """
    root = schema if root is None else root
    values = _finite(schema, root, max_int_range, 0)
    if values is None:
        return None
    return dedupe(values)


def _finite(schema: Any, root: Any, max_int_range: int, depth: int) -> list[Any] | None:
    if depth > FLATTEN_LIMIT:
        return None
    if schema is False:
        return []
    if not isinstance(schema, Mapping):
        return None
    try:
        flat = flatten(schema, root)
    except SchemaError:
        return None
    if not isinstance(flat, Mapping):
        return _finite(flat, root, max_int_range, depth + 1)
    if "const" in flat:
        return [copy.deepcopy(flat["const"])]
    if "enum" in flat:
        return [copy.deepcopy(v) for v in flat["enum"]]
    for key in ("anyOf", "oneOf"):
        if key in flat:
            siblings = {k: v for k, v in flat.items() if k != key and k not in ANNOTATIONS}
            out: list[Any] = []
            for sub in flat[key]:
                try:
                    branch = merge(sub, siblings) if siblings else sub
                except SchemaError:
                    continue
                values = _finite(branch, root, max_int_range, depth + 1)
                if values is None:
                    return None
                out.extend(values)
            return out
    types = types_of(flat)
    if not types:
        return None
    out = []
    for kind in types:
        if kind == "null":
            out.append(None)
        elif kind == "boolean":
            out.extend([False, True])
        elif kind == "integer":
            values = _finite_ints(flat, max_int_range)
            if values is None:
                return None
            out.extend(values)
        else:
            return None
    return out


def _finite_ints(schema: Mapping[str, Any], max_int_range: int) -> list[int] | None:
    lo, hi = int_bounds(schema)
    if lo is None or hi is None:
        return None
    step = schema.get("multipleOf")
    if is_num(step) and step > 0 and float(step).is_integer():
        k_lo, k_hi = -(-lo // int(step)), hi // int(step)
        if k_hi - k_lo + 1 > max_int_range:
            return None
        return [k * int(step) for k in range(k_lo, k_hi + 1)]
    if is_num(step):
        return None
    if hi - lo + 1 > max_int_range:
        return None
    return list(range(lo, hi + 1))
