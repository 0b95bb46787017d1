"""How each family writes one tool call, as its chat template renders it.

Used to show a model its own format when it wrote a call badly, and in docs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.families._markers import family_name

_DS_CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
_DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
_DS_CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
_DS_CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
_DS_SEP = "<\uff5ctool\u2581sep\uff5c>"
_GEMMA_QUOTE = '<|"|>'


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text(value: Any) -> str:
    """An XML-format value: strings verbatim, anything else as JSON."""
    return value if isinstance(value, str) else _json(value)


def _gemma(value: Any) -> str:
    """Gemma 4's argument syntax: strings between <|"|> marks, bare keys."""
    if isinstance(value, str):
        return f"{_GEMMA_QUOTE}{value}{_GEMMA_QUOTE}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_gemma(v)}" for k, v in _sorted(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_gemma(v) for v in value) + "]"
    return _json(value)


def _sorted(arguments: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return sorted(arguments.items(), key=lambda item: str(item[0]).lower())


def call_example(family: str, name: str, arguments: Mapping[str, Any]) -> str:
    """One call to ``name`` with ``arguments``, written as ``family`` writes it."""
    family = family_name(family)
    args = dict(arguments)
    if family == "hermes":
        return f"<tool_call>\n{_json({'name': name, 'arguments': args})}\n</tool_call>"
    if family == "qwen3.5":
        params = "".join(f"<parameter={k}>\n{_text(v)}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if family in ("glm-4.5", "glm-5"):
        sep = "\n" if family == "glm-4.5" else ""
        pairs = "".join(
            f"{sep}<arg_key>{k}</arg_key>{sep}<arg_value>{_text(v)}</arg_value>"
            for k, v in args.items()
        )
        return f"<tool_call>{name}{pairs}{sep}</tool_call>"
    if family == "gpt-oss":
        return (
            f"<|channel|>commentary to=functions.{name} <|constrain|>json"
            f"<|message|>{_json(args)}<|call|>"
        )
    if family == "kimi-k2":
        return (
            f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0"
            f"<|tool_call_argument_begin|>{_json(args)}<|tool_call_end|>"
            "<|tool_calls_section_end|>"
        )
    if family == "minimax-m2":
        params = "".join(f'<parameter name="{k}">{_text(v)}</parameter>\n' for k, v in args.items())
        return (
            f'<minimax:tool_call>\n<invoke name="{name}">\n{params}</invoke>\n</minimax:tool_call>'
        )
    if family == "gemma4":
        fields = ",".join(f"{k}:{_gemma(v)}" for k, v in _sorted(args))
        return f"<|tool_call>call:{name}{{{fields}}}<tool_call|>"
    if family == "deepseek-v3":
        return (
            f"{_DS_CALLS_BEGIN}{_DS_CALL_BEGIN}function{_DS_SEP}{name}\n```json\n"
            f"{_json(args)}\n```{_DS_CALL_END}{_DS_CALLS_END}"
        )
    if family == "deepseek-v3.1":
        call = f"{_DS_CALL_BEGIN}{name}{_DS_SEP}{_json(args)}{_DS_CALL_END}"
        return f"{_DS_CALLS_BEGIN}{call}{_DS_CALLS_END}"
    assert family == "llama-3", family
    return _json({"name": name, "parameters": args})


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
