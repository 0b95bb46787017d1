"""ORS tools and results in MCP's shapes: tool listings, content blocks, call results.

An ORS session's tools become MCP tools with their JSON schemas; the terminal tool
(hidden from ORS listings, since a plain reply reaches it) is listed as a callable
tool, because a harness has no "plain reply goes to the terminal tool" rule. A call's
blocks become MCP content (text and images) and nothing else the model reads: the
reward, ``finished`` and the call's id go in the result's ``_meta``, which harnesses
keep from the model (they show ``structuredContent`` in place of the text, so it is
left empty).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp import types

from ors_gym.protocol import Block, ImageBlock, ListToolsOutput, TextBlock

__all__ = ["CALL_ID_KEYS", "META_PREFIX", "ended_result", "mcp_content", "mcp_tools",
           "result"]

#: The prefix of the keys this server puts in a result's ``_meta``.
META_PREFIX = "ors/"
#: The ``_meta`` keys of a ``tools/call`` request read as the harness's own id for the
#: call, first found wins.
CALL_ID_KEYS: tuple[str, ...] = ("ors/call_id", "tool_call_id", "call_id")

_EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


def mcp_tools(tools: ListToolsOutput) -> list[types.Tool]:
    """The session's tools as MCP tools, the terminal tool last (callable by name)."""
    out = [types.Tool(name=t.name, description=t.description or None,
                      inputSchema=dict(t.input_schema or _EMPTY_OBJECT))
           for t in tools.tools]
    terminal = tools.terminal_tool
    if terminal is not None and not any(t.name == terminal.name for t in tools.tools):
        schema: dict[str, Any] = dict(_EMPTY_OBJECT)
        if terminal.arg is not None:
            schema = {"type": "object", "properties": {terminal.arg: {"type": "string"}},
                      "required": [terminal.arg]}
        description = terminal.description or "Give the final answer; ends the episode."
        out.append(types.Tool(name=terminal.name, description=description,
                              inputSchema=schema))
    return out


def mcp_content(blocks: Sequence[Block]) -> list[types.TextContent | types.ImageContent]:
    """ORS blocks as MCP content: text as text, images as images (base64, MIME type)."""
    out: list[types.TextContent | types.ImageContent] = []
    for block in blocks:
        if isinstance(block, ImageBlock):
            out.append(types.ImageContent(type="image", data=block.data,
                                          mimeType=block.mimeType))
        elif isinstance(block, TextBlock):
            out.append(types.TextContent(type="text", text=block.text))
    return out


def result(blocks: Sequence[Block], *, reward: float, finished: bool, call_id: str | None,
           ok: bool) -> types.CallToolResult:
    """One ORS call's MCP result: its blocks as content, the rest in ``_meta``."""
    meta = {f"{META_PREFIX}reward": reward, f"{META_PREFIX}finished": finished,
            f"{META_PREFIX}call_id": call_id}
    return types.CallToolResult(content=list(mcp_content(blocks)), isError=not ok,
                                _meta=meta)


def ended_result(call_id: str | None) -> types.CallToolResult:
    """The answer to a call after the episode ended: MCP's tool-error shape."""
    text = ("The episode has ended: no further tool calls are run. Stop here and give "
            "your final answer.")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], isError=True,
        _meta={f"{META_PREFIX}reward": 0.0, f"{META_PREFIX}finished": True,
               f"{META_PREFIX}call_id": call_id, f"{META_PREFIX}ended": True})
