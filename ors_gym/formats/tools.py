"""The session's tools as function-calling definitions for a model API.

OpenAI chat, OpenAI Responses and Anthropic each wrap a tool's name,
description and JSON Schema differently; :func:`tools_as` writes one list in
the shape the chosen API takes, so a harness passes it straight to its client.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

from ors_gym.protocol import ListToolsOutput, ToolSpec, parse

__all__ = ["TOOL_FORMATS", "ToolFormat", "tools_as"]

ToolFormat = Literal["openai", "anthropic", "json_schema", "openai_responses"]
TOOL_FORMATS: tuple[str, ...] = get_args(ToolFormat)


def tools_as(
    tools: ListToolsOutput | Iterable[ToolSpec | Mapping[str, Any]], fmt: str = "openai"
) -> list[dict[str, Any]]:
    """The tools as function-calling definitions in format ``fmt``.

    ``fmt``: ``"openai"`` (chat completions ``{"type": "function", "function":
    {...}}``), ``"openai_responses"`` (``{"type": "function", "name", ...}``),
    ``"anthropic"`` (``{"name", "description", "input_schema"}``) or
    ``"json_schema"`` (``{"name", "description", "schema"}``). The terminal
    tool is not listed (ORS hides it: a plain message reaches it); a tool
    without an input schema gets an empty object schema. Schemas are copies.
    """
    if fmt not in TOOL_FORMATS:
        raise ValueError(f"unknown tool format {fmt!r}; choose one of {list(TOOL_FORMATS)}")
    specs = tools.tools if isinstance(tools, ListToolsOutput) else [_tool_spec(t) for t in tools]
    out: list[dict[str, Any]] = []
    for spec in specs:
        schema = (
            copy.deepcopy(spec.input_schema)
            if spec.input_schema is not None
            else {"type": "object", "properties": {}}
        )
        if fmt == "openai":
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        "description": spec.description,
                        "parameters": schema,
                    },
                }
            )
        elif fmt == "openai_responses":
            out.append(
                {
                    "type": "function",
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": schema,
                }
            )
        elif fmt == "anthropic":
            out.append(
                {"name": spec.name, "description": spec.description, "input_schema": schema}
            )
        else:
            out.append({"name": spec.name, "description": spec.description, "schema": schema})
    return out


def _tool_spec(tool: ToolSpec | Mapping[str, Any]) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    if isinstance(tool, Mapping):
        return parse(ToolSpec, dict(tool), what="tool spec")
    raise TypeError(
        f"tools must be a ListToolsOutput or ToolSpec objects/dicts, got {type(tool).__name__}"
    )
