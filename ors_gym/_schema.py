"""JSON-Schema sampling and finite-choice enumeration for tool input schemas.

ORS tools describe their input with pydantic-generated JSON Schemas. Random
agents need arguments that the server will accept, so :func:`compile_sampler`
turns a schema into a function drawing values that validate against it, and
:func:`finite_choices` lists every value of a parameter that has few of them
(for discrete action wrappers).

Supported: ``type`` (single or list), object (``properties``, ``required``,
``additionalProperties``, ``propertyNames``, ``min/maxProperties``), string
(``min/maxLength``, ``pattern``, common ``format``), integer and number (inclusive
and exclusive bounds, ``multipleOf``), boolean, null, array (``items``,
``prefixItems``, ``min/maxItems``, ``uniqueItems``), ``enum``, ``const``,
``$ref`` into the root (``$defs``/``definitions`` or any local JSON pointer),
``anyOf``/``oneOf``, ``allOf`` (merged), and ``default``. Keywords outside this
list (``not``, ``if``, ``patternProperties``, ...) are ignored.
"""

from __future__ import annotations

import base64
import copy
import importlib
import json
import math
import re
import string
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import numpy as np

__all__ = ["SchemaError", "compile_sampler", "finite_choices", "sample_from_schema"]

Sampler = Callable[[np.random.Generator], Any]
_Node = Callable[[np.random.Generator, int], Any]  # (rng, depth) -> value

# Past this nesting depth samplers take the shortest way out (fewest items,
# required properties only, non-recursive anyOf branches); past the hard limit
# the schema has no finite instance.
_SOFT_DEPTH = 4
_HARD_DEPTH = 40
_FLATTEN_LIMIT = 32
_DEFAULT_PROB = 0.1  # how often a valid ``default`` is returned as is
_OPTIONAL_PROB = 0.5  # how often an optional property is included
_EXTRA_ITEMS = 3  # arrays/maps without an upper bound get at most min + this
_UNBOUNDED = 100  # an unbounded number is drawn from [-100, 100]
_INT_LIMIT = 2**62

_ASCII = string.ascii_letters + string.digits + " .,:;!?-_'()/@#%&*+="
_NON_ASCII = "éèüößçñøåÆЖжΩπλ中文字日本語한국€£¥°±µ😀🙂🚀"
# Mostly ASCII, about one character in seven non-ASCII.
_TEXT_POOL = np.array(list(_ASCII * 2 + _NON_ASCII))
_KEY_POOL = np.array(list(string.ascii_lowercase + string.digits + "_"))
_ANNOTATIONS = frozenset(
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
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")


class SchemaError(ValueError):
    """The schema cannot be sampled: unsatisfiable, unsupported, or a bad ``$ref``."""


# ----------------------------------------------------------------- public API


def compile_sampler(schema: Any, *, root: Any = None) -> Sampler:
    """A function ``rng -> value`` drawing values that validate against ``schema``.

    Compile once, sample many times: all parsing, ``$ref`` resolution and
    ``allOf`` merging happen here. ``root`` is the document ``$ref`` pointers
    resolve against (defaults to ``schema``). Raises :class:`SchemaError` for a
    schema that is malformed or has no instances (e.g. ``minimum > maximum``).
    """
    compiler = _Compiler(schema if root is None else root)
    node = compiler.compile(schema)
    return lambda rng: node(rng, 0)


def sample_from_schema(schema: Any, rng: np.random.Generator, *, root: Any = None) -> Any:
    """One value drawn from ``schema`` with ``rng`` (see :func:`compile_sampler`)."""
    return compile_sampler(schema, root=root)(rng)


def finite_choices(schema: Any, root: Any = None, max_int_range: int = 16) -> list[Any] | None:
    """Every value ``schema`` allows, or None when there are too many to list.

    Finite: ``const``, ``enum`` (pydantic ``Literal`` and ``Enum``), boolean,
    null, integers with both bounds and at most ``max_int_range`` values, and
    ``anyOf``/``oneOf``/type lists whose branches are all finite (so
    ``Optional[Literal[...]]`` includes None). Order follows the schema.
    """
    root = schema if root is None else root
    values = _finite(schema, root, max_int_range, 0)
    if values is None:
        return None
    return _dedupe(values)


# ------------------------------------------------------------ schema helpers


def _resolve_ref(ref: Any, root: Any) -> Any:
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


def _is_pure_ref(schema: Mapping[str, Any]) -> bool:
    return "$ref" in schema and all(k == "$ref" or k in _ANNOTATIONS for k in schema)


def _flatten(schema: Any, root: Any, depth: int = 0) -> Any:
    """``schema`` with a top-level ``$ref`` inlined and ``allOf`` merged away."""
    if depth > _FLATTEN_LIMIT:
        raise SchemaError("$ref/allOf chain too deep (a schema that refers to itself?)")
    if not isinstance(schema, Mapping):
        return schema
    if "$ref" not in schema and "allOf" not in schema:
        return schema
    rest = {k: v for k, v in schema.items() if k not in ("$ref", "allOf")}
    parts: list[Any] = []
    if "$ref" in schema:
        parts.append(_flatten(_resolve_ref(schema["$ref"], root), root, depth + 1))
    for sub in schema.get("allOf") or ():
        parts.append(_flatten(sub, root, depth + 1))
    merged: Any = rest
    for part in parts:
        merged = _merge(merged, part)
    return _flatten(merged, root, depth + 1)


_MAX_KEYS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_MIN_KEYS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def _merge(a: Any, b: Any) -> Any:
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
        elif key in _MAX_KEYS and _is_num(mine) and _is_num(value):
            out[key] = max(mine, value)
        elif key in _MIN_KEYS and _is_num(mine) and _is_num(value):
            out[key] = min(mine, value)
        elif key == "enum":
            out[key] = [v for v in mine if any(_same(v, w) for w in value)]
        elif key == "const":
            if not _same(mine, value):
                raise SchemaError(f"allOf combines different consts {mine!r} and {value!r}")
        elif key in ("items", "additionalProperties", "propertyNames"):
            out[key] = _merge(mine, value)
        elif key in ("anyOf", "oneOf"):
            out[key] = [{"allOf": [x, y]} for x in mine for y in value]
        elif key in _ANNOTATIONS:
            continue
        else:
            out[key] = value
    return out


def _widen(types: set[str]) -> set[str]:
    return types | {"integer"} if "number" in types else types


def _is_num(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == True`` is False here, ``1 == 1.0`` is True."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return (type(a) is type(b) and a == b) or (_is_num(a) and _is_num(b) and a == b)


def _key(value: Any) -> str:
    """A canonical string for ``value`` (for de-duplication; 1 and True differ)."""
    return json.dumps(value, sort_keys=True, default=repr) + type(value).__name__


def _dedupe(values: list[Any]) -> list[Any]:
    seen: set[str] = set()
    out = []
    for value in values:
        k = _key(value)
        if k not in seen:
            seen.add(k)
            out.append(value)
    return out


def _types_of(schema: Mapping[str, Any]) -> list[str]:
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


# ------------------------------------------------------------------ compiler


class _Compiler:
    """Turns schema nodes into ``(rng, depth) -> value`` closures; caches ``$ref`` targets."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, _Node | None] = {}

    def compile(self, schema: Any) -> _Node:
        if schema is True or schema is None:
            return self._any()
        if schema is False:
            raise SchemaError("the schema `false` has no valid values")
        if not isinstance(schema, Mapping):
            raise SchemaError(f"a JSON Schema must be an object or a boolean, got {schema!r}")
        if _is_pure_ref(schema):
            node = self._ref(schema["$ref"])
        else:
            node = self._compile_flat(_flatten(schema, self.root))
        if "default" in schema and _fits(schema["default"], schema, self.root):
            return _with_default(node, schema["default"])
        return node

    def _ref(self, ref: str) -> _Node:
        if ref not in self.refs:
            self.refs[ref] = None  # in progress: recursive uses go through the lookup below
            self.refs[ref] = self.compile(_resolve_ref(ref, self.root))
        refs = self.refs

        def sample_ref(rng: np.random.Generator, depth: int) -> Any:
            target = refs[ref]
            assert target is not None
            return target(rng, depth)

        return sample_ref

    def _compile_flat(self, schema: Any) -> _Node:
        if not isinstance(schema, Mapping):
            return self.compile(schema)
        if "const" in schema:
            const = schema["const"]
            return lambda rng, depth: copy.deepcopy(const)
        if "enum" in schema:
            choices = list(schema["enum"])
            if not choices:
                raise SchemaError("an empty enum has no valid values")
            return lambda rng, depth: copy.deepcopy(choices[int(rng.integers(len(choices)))])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self._union(schema, key)
        types = _types_of(schema)
        if not types:
            return self._any()
        if len(types) == 1:
            return self._typed(types[0], schema)
        branches = [self._typed(t, schema) for t in types]
        return _choose(branches, simple=[t not in ("object", "array") for t in types])

    def _union(self, schema: Mapping[str, Any], key: str) -> _Node:
        siblings = {k: v for k, v in schema.items() if k != key and k not in _ANNOTATIONS}
        branches: list[_Node] = []
        simple: list[bool] = []
        errors: list[str] = []
        for sub in schema[key]:
            branch = _merge(sub, siblings) if siblings else sub
            try:
                branches.append(self.compile(branch))
            except SchemaError as exc:  # an unsatisfiable branch is skipped, not fatal
                errors.append(str(exc))
                continue
            simple.append(_is_simple(branch, self.root))
        if not branches:
            raise SchemaError(f"no {key} branch can be sampled: {'; '.join(errors) or 'empty'}")
        return _choose(branches, simple)

    def _typed(self, kind: str, schema: Mapping[str, Any]) -> _Node:
        if kind == "null":
            return lambda rng, depth: None
        if kind == "boolean":
            return lambda rng, depth: bool(rng.integers(2))
        if kind == "integer":
            return _integer(schema)
        if kind == "number":
            return _number(schema)
        if kind == "string":
            return _string(schema)
        if kind == "array":
            return self._array(schema)
        if kind == "object":
            return self._object(schema)
        raise SchemaError(f"unknown JSON Schema type {kind!r}; expected one of {', '.join(_TYPES)}")

    def _any(self) -> _Node:
        leaves = [
            lambda rng, depth: None,
            lambda rng, depth: bool(rng.integers(2)),
            _integer({}),
            _string({"maxLength": 8}),
        ]
        return lambda rng, depth: leaves[int(rng.integers(len(leaves)))](rng, depth)

    def _array(self, schema: Mapping[str, Any]) -> _Node:
        prefix_schemas = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix_schemas, items = items, schema.get("additionalItems", True)
        prefix = [self.compile(s) for s in prefix_schemas or ()]
        lo = int(schema.get("minItems", 0))
        hi_default = max(lo, len(prefix)) + _EXTRA_ITEMS
        hi = int(schema.get("maxItems", hi_default))
        if items is False:
            hi = min(hi, len(prefix))
        hi = min(hi, max(lo, len(prefix)) + _EXTRA_ITEMS)  # keep samples small
        if lo > hi:
            raise SchemaError(f"array needs {lo} items but at most {hi} are allowed")
        if lo > len(prefix) and items is False:
            raise SchemaError("array needs more items than prefixItems allows")
        rest = self.compile(items) if items is not False else None
        unique = bool(schema.get("uniqueItems"))

        def sample_array(rng: np.random.Generator, depth: int) -> list[Any]:
            if depth > _HARD_DEPTH:
                raise SchemaError("recursive schema has no finite instance")
            n = lo if depth >= _SOFT_DEPTH else int(rng.integers(lo, hi + 1))
            out: list[Any] = []
            seen: set[str] = set()
            for i in range(n):
                node = prefix[i] if i < len(prefix) else rest
                assert node is not None
                for _ in range(10 if unique else 1):
                    value = node(rng, depth + 1)
                    if not unique or _key(value) not in seen:
                        break
                else:
                    if len(out) >= lo:
                        break  # cannot find another distinct item; stop short
                    raise SchemaError("cannot draw enough distinct items for uniqueItems")
                seen.add(_key(value))
                out.append(value)
            return out

        return sample_array

    def _object(self, schema: Mapping[str, Any]) -> _Node:
        props = {name: self.compile(sub) for name, sub in (schema.get("properties") or {}).items()}
        required = [r for r in schema.get("required") or () if isinstance(r, str)]
        extra_schema = schema.get("additionalProperties", True)
        extra = self.compile(extra_schema) if extra_schema is not False else None
        names = self.compile(schema["propertyNames"]) if "propertyNames" in schema else _identifier
        for name in required:
            if name not in props:
                if extra is None:
                    raise SchemaError(f"property {name!r} is required but not allowed")
                props[name] = extra
        optional = [n for n in props if n not in required]
        # Free-form keys only for map-like objects (no declared properties) or to
        # reach minProperties: declared models may forbid extras.
        lo = int(schema.get("minProperties", 0))
        cap = int(schema.get("maxProperties", len(props) + lo + _EXTRA_ITEMS))
        free = "properties" not in schema and extra is not None
        free_hi = min(cap, lo + _EXTRA_ITEMS)
        if len(required) > cap or lo > cap:
            raise SchemaError("object needs more properties than maxProperties allows")

        def sample_object(rng: np.random.Generator, depth: int) -> dict[str, Any]:
            if depth > _HARD_DEPTH:
                raise SchemaError("recursive schema has no finite instance")
            out: dict[str, Any] = {}
            shallow = depth < _SOFT_DEPTH
            for name in required:
                out[name] = props[name](rng, depth + 1)
            for name in optional:
                if len(out) < cap and shallow and rng.random() < _OPTIONAL_PROB:
                    out[name] = props[name](rng, depth + 1)
            if extra is not None:
                target = int(rng.integers(lo, free_hi + 1)) if free and shallow else lo
                for _ in range(4 * (target - len(out)) + 4):
                    if len(out) >= target:
                        break
                    key = names(rng, depth + 1)
                    if key not in out and isinstance(key, str):
                        out[key] = extra(rng, depth + 1)
            return out

        return sample_object


def _choose(branches: list[_Node], simple: list[bool]) -> _Node:
    """Pick a branch at random; deep in a recursion, prefer non-recursive branches."""
    leafy = [b for b, s in zip(branches, simple, strict=True) if s] or branches

    def sample_choice(rng: np.random.Generator, depth: int) -> Any:
        pool = branches if depth < _SOFT_DEPTH else leafy
        return pool[int(rng.integers(len(pool)))](rng, depth)

    return sample_choice


def _is_simple(schema: Any, root: Any) -> bool:
    """True for branches that cannot recurse (scalars, enums, consts)."""
    try:
        flat = _flatten(schema, root)
    except SchemaError:
        return False
    if not isinstance(flat, Mapping):
        return True
    if "const" in flat or "enum" in flat:
        return True
    types = _types_of(flat)
    return bool(types) and not ({"object", "array"} & set(types)) and "anyOf" not in flat


def _with_default(node: _Node, default: Any) -> _Node:
    def sample_default(rng: np.random.Generator, depth: int) -> Any:
        if rng.random() < _DEFAULT_PROB:
            return copy.deepcopy(default)
        return node(rng, depth)

    return sample_default


def _identifier(rng: np.random.Generator, depth: int) -> str:
    n = int(rng.integers(1, 9))
    return "k" + "".join(_KEY_POOL[rng.integers(len(_KEY_POOL), size=n)])


# ------------------------------------------------------------------- scalars


def _int_bounds(schema: Mapping[str, Any]) -> tuple[int | None, int | None]:
    lo: int | None = None
    hi: int | None = None
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    ex_min, ex_max = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if ex_min is True and _is_num(minimum):  # draft 4 boolean form
        ex_min, minimum = minimum, None
    if ex_max is True and _is_num(maximum):
        ex_max, maximum = maximum, None
    if _is_num(minimum):
        lo = math.ceil(minimum)
    if _is_num(ex_min):
        lo = max(lo, math.floor(ex_min) + 1) if lo is not None else math.floor(ex_min) + 1
    if _is_num(maximum):
        hi = math.floor(maximum)
    if _is_num(ex_max):
        hi = min(hi, math.ceil(ex_max) - 1) if hi is not None else math.ceil(ex_max) - 1
    return lo, hi


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


def _integer(schema: Mapping[str, Any]) -> _Node:
    lo, hi = _clamp_range(*_int_bounds(schema))
    step = schema.get("multipleOf")
    if _is_num(step) and step > 0:
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
        if roll < 0.05:
            k = lo
        elif roll < 0.1:
            k = hi
        else:
            k = int(rng.integers(lo, hi, endpoint=True))
        return int(k * step)

    return sample_integer


def _number(schema: Mapping[str, Any]) -> _Node:
    minimum, maximum = schema.get("minimum"), schema.get("maximum")
    ex_min, ex_max = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if ex_min is True and _is_num(minimum):
        ex_min, minimum = minimum, None
    if ex_max is True and _is_num(maximum):
        ex_max, maximum = maximum, None
    lows = [float(minimum)] if _is_num(minimum) else []
    if _is_num(ex_min):
        lows.append(float(np.nextafter(float(ex_min), math.inf)))
    highs = [float(maximum)] if _is_num(maximum) else []
    if _is_num(ex_max):
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
    if _is_num(step) and step > 0:
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
        if roll < 0.05:
            return span_lo
        if roll < 0.1:
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


def _string(schema: Mapping[str, Any]) -> _Node:
    lo = int(schema.get("minLength", 0))
    hi = int(schema.get("maxLength", lo + 16))
    hi = min(hi, lo + 16)
    if lo > hi:
        raise SchemaError(f"string needs minLength {lo} but maxLength is {hi}")
    pattern = schema.get("pattern")
    fmt = _FORMATS.get(schema.get("format", ""))
    if isinstance(pattern, str):
        return _pattern_string(pattern, lo, int(schema.get("maxLength", 10**9)), schema)
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


def _pattern_string(pattern: str, lo: int, hi: int, schema: Mapping[str, Any]) -> _Node:
    """Strings matching ``pattern`` (search semantics) with length in [lo, hi]."""
    try:
        regex = re.compile(pattern)
        parsed = _sre_parser().parse(pattern)
    except Exception as exc:  # re.error, or a parser quirk
        raise SchemaError(f"cannot use pattern {pattern!r}: {exc}") from None

    def ok(value: Any) -> bool:
        return isinstance(value, str) and lo <= len(value) <= hi and bool(regex.search(value))

    fallbacks = [v for v in [schema.get("default"), *(schema.get("examples") or ())] if ok(v)]
    probe = np.random.default_rng(0)
    for _ in range(50):
        value = _regex_sample(parsed, probe)
        if ok(value):
            fallbacks.append(value)
            break
    if not fallbacks:
        raise SchemaError(f"cannot generate strings matching pattern {pattern!r}")

    def sample_pattern(rng: np.random.Generator, depth: int) -> str:
        for _ in range(10):
            value = _regex_sample(parsed, rng)
            if ok(value):
                return value
        return str(fallbacks[int(rng.integers(len(fallbacks)))])

    return sample_pattern


def _sre_parser() -> Any:
    try:
        return importlib.import_module("re._parser")
    except ImportError:  # pragma: no cover - Python < 3.11
        return importlib.import_module("sre_parse")


_CATEGORIES = {
    "CATEGORY_DIGIT": string.digits,
    "CATEGORY_NOT_DIGIT": string.ascii_letters + " -_",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": string.ascii_letters + string.digits,
    "CATEGORY_WORD": string.ascii_letters + string.digits + "_",
    "CATEGORY_NOT_WORD": " -.,",
}
_PRINTABLE = string.ascii_letters + string.digits + " -_.,:;!?/"


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


# ---------------------------------------------------- light validity checking


def _fits(value: Any, schema: Any, root: Any, depth: int = 0) -> bool:
    """A conservative check that ``value`` is valid for ``schema`` (for defaults).

    Only ``True`` is trusted: unsupported keywords, deep nesting or a bad
    ``$ref`` make it answer False, so an invalid default is never returned.
    """
    if depth > 20:
        return False
    if schema is True:
        return True
    if not isinstance(schema, Mapping):
        return False
    try:
        schema = _flatten(schema, root)
    except SchemaError:
        return False
    if not isinstance(schema, Mapping):
        return schema is True
    if "const" in schema and not _same(value, schema["const"]):
        return False
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        return False
    for key in ("anyOf", "oneOf"):
        if key in schema and not any(_fits(value, s, root, depth + 1) for s in schema[key]):
            return False
    types = _types_of(schema)
    if types and not any(_type_ok(value, t) for t in types):
        return False
    if _is_num(value):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if (_is_num(lo) and value < lo) or (_is_num(hi) and value > hi):
            return False
        if (_is_num(ex_lo) and value <= ex_lo) or (_is_num(ex_hi) and value >= ex_hi):
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
        if isinstance(items, list) or not all(_fits(v, items, root, depth + 1) for v in value):
            return False
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        if any(r not in value for r in schema.get("required") or ()):
            return False
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            sub = props.get(k, extra)
            if sub is False or not _fits(v, sub, root, depth + 1):
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
        return _is_num(value) and (isinstance(value, int) or float(value).is_integer())
    if kind == "number":
        return _is_num(value)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return False


# ------------------------------------------------------------ finite choices


def _finite(schema: Any, root: Any, max_int_range: int, depth: int) -> list[Any] | None:
    if depth > _FLATTEN_LIMIT:
        return None
    if schema is False:
        return []
    if not isinstance(schema, Mapping):
        return None
    try:
        flat = _flatten(schema, root)
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
            siblings = {k: v for k, v in flat.items() if k != key and k not in _ANNOTATIONS}
            out: list[Any] = []
            for sub in flat[key]:
                try:
                    branch = _merge(sub, siblings) if siblings else sub
                except SchemaError:
                    continue
                values = _finite(branch, root, max_int_range, depth + 1)
                if values is None:
                    return None
                out.extend(values)
            return out
    types = _types_of(flat)
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
    lo, hi = _int_bounds(schema)
    if lo is None or hi is None:
        return None
    step = schema.get("multipleOf")
    if _is_num(step) and step > 0 and float(step).is_integer():
        k_lo, k_hi = -(-lo // int(step)), hi // int(step)
        if k_hi - k_lo + 1 > max_int_range:
            return None
        return [k * int(step) for k in range(k_lo, k_hi + 1)]
    if _is_num(step):
        return None
    if hi - lo + 1 > max_int_range:
        return None
    return list(range(lo, hi + 1))
