"""Compile a JSON Schema into a function drawing random values that validate against it.

Random agents (``ToolCallSpace.sample``, ``ScriptedLLM``) need arguments the
server accepts. :func:`compile_sampler` walks the schema once (``$ref``
targets compiled once and shared, so recursive schemas work) into nested
``(rng, depth) -> value`` closures; sampling then only calls them. Past a soft
depth, recursion takes the shortest way out (fewest items, required
properties only, non-recursive branches), so every draw is finite.

Supported: ``type`` (single or list), object (``properties``, ``required``,
``additionalProperties``, ``propertyNames``, ``min/maxProperties``), string
(``min/maxLength``, ``pattern``, common ``format``), integer and number
(inclusive and exclusive bounds, ``multipleOf``), boolean, null, array
(``items``, ``prefixItems``, ``min/maxItems``, ``uniqueItems``), ``enum``,
``const``, ``$ref`` into the root (``$defs``/``definitions`` or any local JSON
pointer), ``anyOf``/``oneOf``, ``allOf`` (merged), and ``default``. Keywords
outside this list (``not``, ``if``, ``patternProperties``, ...) are ignored.
"""

from __future__ import annotations

import copy
import string
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ors_gym.schema.resolve import (
    ANNOTATIONS,
    SchemaError,
    flatten,
    is_pure_ref,
    json_key,
    merge,
    resolve_ref,
    types_of,
)
from ors_gym.schema.scalars import Node, integer_sampler, number_sampler, string_sampler
from ors_gym.schema.validate import fits

__all__ = ["Sampler", "compile_sampler", "sample_from_schema"]

#: A compiled schema: ``rng -> value``.
Sampler = Callable[[np.random.Generator], Any]

# Past this nesting depth samplers take the shortest way out (fewest items,
# required properties only, non-recursive anyOf branches); past the hard limit
# the schema has no finite instance.
_SOFT_DEPTH = 4
_HARD_DEPTH = 40
_DEFAULT_PROB = 0.1  # how often a valid ``default`` is returned as is
_OPTIONAL_PROB = 0.5  # how often an optional property is included
_EXTRA_ITEMS = 3  # arrays/maps without an upper bound get at most min + this
_KEY_POOL = np.array(list(string.ascii_lowercase + string.digits + "_"))
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")


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


class _Compiler:
    """Turns schema nodes into ``(rng, depth) -> value`` closures; caches ``$ref`` targets."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, Node | None] = {}

    def compile(self, schema: Any) -> Node:
        if schema is True or schema is None:
            return self._any()
        if schema is False:
            raise SchemaError("the schema `false` has no valid values")
        if not isinstance(schema, Mapping):
            raise SchemaError(f"a JSON Schema must be an object or a boolean, got {schema!r}")
        if is_pure_ref(schema):
            node = self._ref(schema["$ref"])
        else:
            node = self._compile_flat(flatten(schema, self.root))
        if "default" in schema and fits(schema["default"], schema, self.root):
            return _with_default(node, schema["default"])
        return node

    def _ref(self, ref: str) -> Node:
        if ref not in self.refs:
            self.refs[ref] = None  # in progress: recursive uses go through the lookup below
            self.refs[ref] = self.compile(resolve_ref(ref, self.root))
        refs = self.refs

        def sample_ref(rng: np.random.Generator, depth: int) -> Any:
            target = refs[ref]
            assert target is not None
            return target(rng, depth)

        return sample_ref

    def _compile_flat(self, schema: Any) -> Node:
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
        types = types_of(schema)
        if not types:
            return self._any()
        if len(types) == 1:
            return self._typed(types[0], schema)
        branches = [self._typed(t, schema) for t in types]
        return _choose(branches, simple=[t not in ("object", "array") for t in types])

    def _union(self, schema: Mapping[str, Any], key: str) -> Node:
        siblings = {k: v for k, v in schema.items() if k != key and k not in ANNOTATIONS}
        branches: list[Node] = []
        simple: list[bool] = []
        errors: list[str] = []
        for sub in schema[key]:
            branch = merge(sub, siblings) if siblings else sub
            try:
                branches.append(self.compile(branch))
            except SchemaError as exc:  # an unsatisfiable branch is skipped, not fatal
                errors.append(str(exc))
                continue
            simple.append(_is_simple(branch, self.root))
        if not branches:
            raise SchemaError(f"no {key} branch can be sampled: {'; '.join(errors) or 'empty'}")
        return _choose(branches, simple)

    def _typed(self, kind: str, schema: Mapping[str, Any]) -> Node:
        if kind == "null":
            return lambda rng, depth: None
        if kind == "boolean":
            return lambda rng, depth: bool(rng.integers(2))
        if kind == "integer":
            return integer_sampler(schema)
        if kind == "number":
            return number_sampler(schema)
        if kind == "string":
            return string_sampler(schema)
        if kind == "array":
            return self._array(schema)
        if kind == "object":
            return self._object(schema)
        raise SchemaError(f"unknown JSON Schema type {kind!r}; expected one of {', '.join(_TYPES)}")

    def _any(self) -> Node:
        leaves = [
            lambda rng, depth: None,
            lambda rng, depth: bool(rng.integers(2)),
            integer_sampler({}),
            string_sampler({"maxLength": 8}),
        ]
        return lambda rng, depth: leaves[int(rng.integers(len(leaves)))](rng, depth)

    def _array(self, schema: Mapping[str, Any]) -> Node:
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
                    if not unique or json_key(value) not in seen:
                        break
                else:
                    if len(out) >= lo:
                        break  # cannot find another distinct item; stop short
                    raise SchemaError("cannot draw enough distinct items for uniqueItems")
                seen.add(json_key(value))
                out.append(value)
            return out

        return sample_array

    def _object(self, schema: Mapping[str, Any]) -> Node:
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


def _choose(branches: list[Node], simple: list[bool]) -> Node:
    """Pick a branch at random; deep in a recursion, prefer non-recursive branches."""
    leafy = [b for b, s in zip(branches, simple, strict=True) if s] or branches

    def sample_choice(rng: np.random.Generator, depth: int) -> Any:
        pool = branches if depth < _SOFT_DEPTH else leafy
        return pool[int(rng.integers(len(pool)))](rng, depth)

    return sample_choice


def _is_simple(schema: Any, root: Any) -> bool:
    """True for branches that cannot recurse (scalars, enums, consts)."""
    try:
        flat = flatten(schema, root)
    except SchemaError:
        return False
    if not isinstance(flat, Mapping):
        return True
    if "const" in flat or "enum" in flat:
        return True
    types = types_of(flat)
    return bool(types) and not ({"object", "array"} & set(types)) and "anyOf" not in flat


def _with_default(node: Node, default: Any) -> Node:
    def sample_default(rng: np.random.Generator, depth: int) -> Any:
        if rng.random() < _DEFAULT_PROB:
            return copy.deepcopy(default)
        return node(rng, depth)

    return sample_default


def _identifier(rng: np.random.Generator, depth: int) -> str:
    n = int(rng.integers(1, 9))
    return "k" + "".join(_KEY_POOL[rng.integers(len(_KEY_POOL), size=n)])
