"""A conservative validity check, so a schema's ``default`` is only used when it is valid.

Samplers return a schema's ``default`` now and then (real agents use defaults).
A default can itself be invalid (pydantic does not check them), so it is
trusted only when :func:`fits` says True; anything this check does not fully
understand answers False. This is not a general JSON Schema validator.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ors_gym.schema.resolve import SchemaError, flatten, is_num, json_equal, types_of
from ors_gym.schema.scalars import number_bounds

__all__ = ["fits"]

_MAX_DEPTH = 20


def fits(value: Any, schema: Any, root: Any, depth: int = 0) -> bool:
    """True only when ``value`` is surely valid for ``schema`` (``$ref``s against ``root``).

    Unsupported keywords, deep nesting or a bad ``$ref`` make it answer False,
    so an invalid default is never returned.
    """
    if depth > _MAX_DEPTH:
        return False
    if schema is True:
        return True
    if not isinstance(schema, Mapping):
        return False
    try:
        schema = flatten(schema, root)
    except SchemaError:
        return False
    if not isinstance(schema, Mapping):
        return schema is True
    if "const" in schema and not json_equal(value, schema["const"]):
        return False
    if "enum" in schema and not any(json_equal(value, v) for v in schema["enum"]):
        return False
    for key in ("anyOf", "oneOf"):
        if key in schema and not any(fits(value, s, root, depth + 1) for s in schema[key]):
            return False
    types = types_of(schema)
    if types and not any(_type_ok(value, t) for t in types):
        return False
    if is_num(value):
        lo, ex_lo, hi, ex_hi = number_bounds(schema)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            return False
        if (ex_lo is not None and value <= ex_lo) or (ex_hi is not None and value >= ex_hi):
            return False
        if "multipleOf" in schema:
            return False  # float multiples are fragile; do not use such defaults
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", math.inf):
            return False
        if "pattern" in schema:
            try:
                if not re.search(schema["pattern"], value):
                    return False
            except (re.error, TypeError):
                return False
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", math.inf):
            return False
        if "prefixItems" in schema or schema.get("uniqueItems") or "contains" in schema:
            return not value  # only the empty list is trusted here
        items = schema.get("items", True)
        if isinstance(items, list) or not all(fits(v, items, root, depth + 1) for v in value):
            return False
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        if any(r not in value for r in schema.get("required") or ()):
            return False
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            sub = props.get(k, extra)
            if sub is False or not fits(v, sub, root, depth + 1):
                return False
        if "propertyNames" in schema or "minProperties" in schema or "maxProperties" in schema:
            return not value
    return True


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return is_num(value) and (isinstance(value, int) or float(value).is_integer())
    if kind == "number":
        return is_num(value)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return False
