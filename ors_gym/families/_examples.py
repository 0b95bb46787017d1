"""A family's calls written out: to show a model its own format when it wrote a call
badly, and to offer tools in a system prompt (the writers are the formats' rows).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.families._formats import FORMATS
from ors_gym.families._table import format_name


def call_example(family: str, name: str, arguments: Mapping[str, Any]) -> str:
    """One call to ``name`` with ``arguments``, written as ``family`` (a model family or
    a wire format) writes it: its format's example writer."""
    return FORMATS[format_name(family)].example(name, dict(arguments))


def tools_prompt(tools: Sequence[Mapping[str, Any]], family: str) -> str:
    """A system prompt offering ``tools`` (OpenAI function tools) and showing how
    ``family`` calls one: for a template that does not render the tools itself."""
    specs = [t.get("function", t) for t in tools if isinstance(t, Mapping)]
    lines = [
        "You act by calling tools. The tools, as JSON schemas:",
        *(json.dumps(dict(s), sort_keys=True) for s in specs),
        f"To call a tool, write: {example_call(family, None, tools)}",
    ]
    return "\n".join(lines)


def example_call(family: str, name: str | None, tools: Sequence[Mapping[str, Any]] | None) -> str:
    """A sample call for an error message: to ``name`` (or the first tool) with
    a placeholder for its first parameter."""
    specs = [t.get("function", t) for t in tools or () if isinstance(t, Mapping)]
    specs = [s for s in specs if isinstance(s, Mapping) and isinstance(s.get("name"), str)]
    spec = next((s for s in specs if s["name"] == name), specs[0] if specs else None)
    if spec is None:
        return call_example(family, name or "tool_name", {"argument": "value"})
    props = (spec.get("parameters") or {}).get("properties") or {}
    args = {}
    if isinstance(props, Mapping) and props:
        key, schema = next(iter(props.items()))
        args[key] = _placeholder(schema if isinstance(schema, Mapping) else {})
    return call_example(family, spec["name"], args)


def _placeholder(schema: Mapping[str, Any]) -> Any:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    return {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}.get(
        str(schema.get("type")), "value"
    )
