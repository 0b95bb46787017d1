"""Reading a JSON Schema: ``$ref`` resolution, ``allOf`` merging and JSON equality.

Every other part of :mod:`ors_gym.schema` works on *flat* schemas: a mapping
with no top-level ``$ref`` or ``allOf``. :func:`flatten` produces them (inlining
the reference, intersecting the ``allOf`` parts with :func:`merge`), so the
sampler, the validity check and the finite enumeration each handle keywords
in one place. Also here: the small JSON-value helpers they share.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeGuard

__all__ = [
    "ANNOTATIONS",
    "FLATTEN_LIMIT",
    "SchemaError",
    "dedupe",
    "flatten",
    "is_num",
    "is_pure_ref",
    "json_equal",
    "json_key",
    "merge",
    "resolve_ref",
    "types_of",
]

#: How many ``$ref``/``allOf`` levels :func:`flatten` follows before calling the schema circular.
FLATTEN_LIMIT = 32

#: Keywords that describe a value without constraining it.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "examples",
        "default",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$id",
        "$schema",
        "$defs",
        "definitions",
        "discriminator",
    }
)

_MAX_KEYS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_MIN_KEYS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


class SchemaError(ValueError):
    """The schema cannot be sampled: unsatisfiable, unsupported, or a bad ``$ref``."""


def resolve_ref(ref: Any, root: Any) -> Any:
    """The schema a local ``$ref`` (``#/...`` JSON pointer) points at in ``root``."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaError(
            f"unsupported $ref {ref!r}: only local refs ('#/$defs/Name') are supported"
        )
    node = root
    pointer = ref[1:]
    if pointer in ("", "/"):
        return root
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SchemaError(f"$ref {ref!r} does not resolve in the root schema")
    return node


def is_pure_ref(schema: Mapping[str, Any]) -> bool:
    """True when ``schema`` is a ``$ref`` and nothing else (annotations aside)."""
    return "$ref" in schema and all(k == "$ref" or k in ANNOTATIONS for k in schema)


def flatten(schema: Any, root: Any, depth: int = 0) -> Any:
    """``schema`` with a top-level ``$ref`` inlined and ``allOf`` merged away."""
    if depth > FLATTEN_LIMIT:
        raise SchemaError("$ref/allOf chain too deep (a schema that refers to itself?)")
    if not isinstance(schema, Mapping):
        return schema
    if "$ref" not in schema and "allOf" not in schema:
        return schema
    rest = {k: v for k, v in schema.items() if k not in ("$ref", "allOf")}
    parts: list[Any] = []
    if "$ref" in schema:
        parts.append(flatten(resolve_ref(schema["$ref"], root), root, depth + 1))
    for sub in schema.get("allOf") or ():
        parts.append(flatten(sub, root, depth + 1))
    merged: Any = rest
    for part in parts:
        merged = merge(merged, part)
    return flatten(merged, root, depth + 1)


def merge(a: Any, b: Any) -> Any:
    """The schema of values valid against both ``a`` and ``b`` (simple cases)."""
    if a is True or a == {}:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        raise SchemaError(f"cannot combine schemas {a!r} and {b!r}")
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
            continue
        mine = out[key]
        if key == "type":
            left = {mine} if isinstance(mine, str) else set(mine)
            right = {value} if isinstance(value, str) else set(value)
            both = _widen(left) & _widen(right)  # integer is a subtype of number
            if "number" in both:
                both.discard("integer")
            if not both:
                raise SchemaError(f"allOf combines incompatible types {mine!r} and {value!r}")
            out[key] = next(iter(both)) if len(both) == 1 else sorted(both)
        elif key == "properties":
            props = dict(mine)
            for name, sub in value.items():
                props[name] = {"allOf": [props[name], sub]} if name in props else sub
            out[key] = props
        elif key == "required":
            out[key] = list(dict.fromkeys([*mine, *value]))
        elif key in _MAX_KEYS and is_num(mine) and is_num(value):
            out[key] = max(mine, value)
        elif key in _MIN_KEYS and is_num(mine) and is_num(value):
            out[key] = min(mine, value)
        elif key == "enum":
            out[key] = [v for v in mine if any(json_equal(v, w) for w in value)]
        elif key == "const":
            if not json_equal(mine, value):
                raise SchemaError(f"allOf combines different consts {mine!r} and {value!r}")
        elif key in ("items", "additionalProperties", "propertyNames"):
            out[key] = merge(mine, value)
        elif key in ("anyOf", "oneOf"):
            out[key] = [{"allOf": [x, y]} for x in mine for y in value]
        elif key in ANNOTATIONS:
            continue
        else:
            out[key] = value
    return out


def _widen(types: set[str]) -> set[str]:
    return types | {"integer"} if "number" in types else types


def is_num(x: Any) -> TypeGuard[int | float]:
    """A JSON number: int or float, but not bool."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == True`` is False here, ``1 == 1.0`` is True."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return (type(a) is type(b) and a == b) or (is_num(a) and is_num(b) and a == b)


def json_key(value: Any) -> str:
    """A canonical string for ``value`` (for de-duplication; 1 and True differ)."""
    return json.dumps(value, sort_keys=True, default=repr) + type(value).__name__


def dedupe(values: list[Any]) -> list[Any]:
    """``values`` without repeats (by :func:`json_key`), first occurrences in order."""
    seen: set[str] = set()
    out = []
    for value in values:
        k = json_key(value)
        if k not in seen:
            seen.add(k)
            out.append(value)
    return out


def types_of(schema: Mapping[str, Any]) -> list[str]:
    """The JSON types ``schema`` allows, inferred from its keywords when ``type`` is absent."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list) and declared:
        return [t for t in declared if isinstance(t, str)]
    keys = schema.keys()
    if keys & {"properties", "required", "additionalProperties", "propertyNames", "minProperties"}:
        return ["object"]
    if keys & {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}:
        return ["array"]
    if keys & {"minLength", "maxLength", "pattern", "format"}:
        return ["string"]
    if keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
        return ["number"]
    return []
