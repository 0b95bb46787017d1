"""Agent mistakes, told the way a model needs them: short, specific, with the fix.

The SDK answers an unknown tool with ``'x' is not a valid tool`` and a bad
input with pydantic's raw error list (types, URLs, a Python repr). The agent
sees a rewrite instead, in sentences: the valid tool names and the nearest match,
or one line per field, with each argument name the tool does not take named beside the
nearest one it does (the SDK's models ignore an unknown key, so a misspelt one shows only
as its parameter "missing"); ``info["calls"][i]["error"]`` keeps the server's own words.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Mapping
from typing import Any

from ors_gym.protocol import ListToolsOutput

__all__ = ["explain"]

_VALIDATION_PREFIX = "Tool input validation error:"


def explain(
    name: str, error: str, reason: str | None, tools: ListToolsOutput,
    arguments: Mapping[str, Any] | None = None,
) -> str:
    """The text an agent reads for a failed call of tool ``name`` with ``arguments``."""
    if reason == "not_found":
        return _unknown_tool(name, tools)
    if reason == "input_validation":
        return _invalid_input(name, error, _parameters(name, tools), arguments or {})
    return error


def _unknown_tool(name: str, tools: ListToolsOutput) -> str:
    names = [t.name for t in tools.tools]
    text = f"{name!r} is not a valid tool."
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        text = f"{name!r} is not a valid tool; did you mean {close[0]!r}?"
    return f"{text} Tools: {', '.join(names) or '(none)'}."


def _parameters(name: str, tools: ListToolsOutput) -> list[str] | None:
    """The argument names tool ``name`` takes, from its listed schema (None: not known)."""
    for tool in tools.tools:
        if tool.name == name and isinstance(tool.input_schema, Mapping):
            properties = tool.input_schema.get("properties")
            return list(properties) if isinstance(properties, Mapping) else []
    return None


def _unknown_arguments(name: str, known: list[str], arguments: Mapping[str, Any]) -> list[str]:
    """One sentence per argument name ``name`` does not take, with the nearest it does."""
    lines = []
    for key in arguments:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        lines.append(f"{key!r} is not an argument of {name!r}{hint}")
    if lines:
        lines.append(f"Its arguments: {', '.join(known) or '(none)'}.")
    return lines


def _invalid_input(
    name: str, error: str, known: list[str] | None, arguments: Mapping[str, Any]
) -> str:
    detail = error.partition(_VALIDATION_PREFIX)[2].strip()
    try:
        problems = ast.literal_eval(detail)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return error
    if not isinstance(problems, list) or not all(isinstance(p, dict) for p in problems):
        return error
    unknown = _unknown_arguments(name, known, arguments) if known is not None else []
    lines = [*unknown, *(_field_line(p) for p in problems)]
    return f"The arguments of {name!r} are invalid:\n" + "\n".join(lines)


def _field_line(problem: dict[str, Any]) -> str:
    where = ".".join(str(part) for part in problem.get("loc", ())) or "(arguments)"
    line = f"{where}: {problem.get('msg', 'invalid')}"
    if problem.get("type") != "missing" and "input" in problem:
        line += f", got {_short(problem['input'])}"
    return line if line.endswith((".", "?", "!")) else line + "."


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
