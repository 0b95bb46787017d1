"""An MCP endpoint relayed over stdio, for a harness that starts its MCP servers as
commands: ``python -m ors_gym.mcp URL``.

The relay is an MCP server on its stdin/stdout and a client of the streamable-HTTP
endpoint at ``URL``: tool listings and calls (with their ``_meta``, so the harness's
call ids arrive) go through unchanged, and the endpoint's ``tools/list_changed`` is
passed on. The ORS session stays with the process that serves ``URL``.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

__all__ = ["main", "relay"]


async def relay(url: str) -> None:
    """Serve the endpoint at ``url`` on stdin/stdout until stdin closes."""
    server: Server[Any, Any] = Server("ors-gym")
    downstream: list[Any] = []  # the stdio side's session, once a request came in

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", None)
        if isinstance(root, types.ToolListChangedNotification) and downstream:
            await downstream[0].send_tool_list_changed()

    async with streamable_http_client(url) as (read, write, _), \
            ClientSession(read, write, message_handler=on_message) as upstream:
        await upstream.initialize()

        @server.list_tools()
        async def list_tools() -> list[types.Tool]:
            downstream[:] = [server.request_context.session]
            return (await upstream.list_tools()).tools

        @server.call_tool(validate_input=False)
        async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            meta = server.request_context.meta
            extra = dict(meta.model_extra or {}) if meta is not None else None
            return await upstream.call_tool(name, arguments, meta=extra or None)

        async with stdio_server() as (stdin, stdout):
            await server.run(stdin, stdout, server.create_initialization_options(
                NotificationOptions(tools_changed=True)))


def main(argv: list[str] | None = None) -> int:
    """``python -m ors_gym.mcp URL``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].startswith(("http://", "https://")):
        print("usage: python -m ors_gym.mcp URL   (URL: an ORS session's MCP endpoint, "
              "http://host:port/mcp/<id>)", file=sys.stderr)
        return 2
    anyio.run(relay, args[0])
    return 0
