"""Agent mistakes, told the way a model needs them: short, specific, with the fix.

The SDK answers an unknown tool with ``'x' is not a valid tool`` and a bad
input with pydantic's raw error list (types, URLs, a Python repr). The agent
sees a rewrite instead: the valid tool names and the nearest match, or one
line per field; ``info["calls"][i]["error"]`` keeps the server's own words.
"""

from __future__ import annotations

import ast
import difflib
from typing import Any

from ors_gym.protocol import ListToolsOutput

__all__ = ["explain"]

_VALIDATION_PREFIX = "Tool input validation error:"


def explain(name: str, error: str, reason: str | None, tools: ListToolsOutput) -> str:
    """The text an agent reads for a failed call of tool ``name``."""
    if reason == "not_found":
        return _unknown_tool(name, tools)
    if reason == "input_validation":
        return _invalid_input(name, error)
    return error


def _unknown_tool(name: str, tools: ListToolsOutput) -> str:
    names = [t.name for t in tools.tools]
    text = f"{name!r} is not a valid tool"
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        text += f"; did you mean {close[0]!r}?"
    return f"{text} tools: {', '.join(names) or '(none)'}"


def _invalid_input(name: str, error: str) -> str:
    detail = error.partition(_VALIDATION_PREFIX)[2].strip()
    try:
        problems = ast.literal_eval(detail)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return error
    if not isinstance(problems, list) or not all(isinstance(p, dict) for p in problems):
        return error
    lines = [_field_line(p) for p in problems]
    return f"the arguments of {name!r} are invalid:\n" + "\n".join(lines)


def _field_line(problem: dict[str, Any]) -> str:
    where = ".".join(str(part) for part in problem.get("loc", ())) or "(arguments)"
    line = f"{where}: {problem.get('msg', 'invalid')}"
    if problem.get("type") != "missing" and "input" in problem:
        line += f", got {_short(problem['input'])}"
    return line


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
