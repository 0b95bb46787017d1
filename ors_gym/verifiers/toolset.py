"""The MCP tool server that offers a rollout's ORS tools and forwards calls to its session.

One server runs for the whole eval (a verifiers shared toolset, in its own process);
each call reads the calling rollout's ``OrsState`` over verifiers' state channel, so
the tool list is that session's (``@terminal`` tool hidden, names unprefixed) and a
call goes to that session. The outcome (reward, ``finished``) is written back to the
state, where the task's ``@stop`` sees it before the model is called again.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, Tool
from verifiers.v1.mcp import Toolset

from ors_gym.errors import OrsError
from ors_gym.protocol import RunToolSuccess
from ors_gym.verifiers.config import OrsToolsetConfig
from ors_gym.verifiers.messages import blocks_as_mcp
from ors_gym.verifiers.sessions import shared_backend
from ors_gym.verifiers.state import OrsState

__all__ = ["OrsToolset"]

logger = logging.getLogger("ors_gym.verifiers")


class OrsToolset(Toolset[OrsToolsetConfig, OrsState]):
    """Each rollout's ORS tools, under their own names."""

    TOOL_PREFIX = None

    def register(self, mcp: MCPServer) -> None:
        # The tool list differs per rollout, so the server's two handlers are replaced
        # (they are public methods its protocol layer calls) rather than tools registered.
        server = cast(Any, mcp)
        server.list_tools = self._with_state(self.list_tools)
        server.call_tool = self._with_state(self.call_tool)

    async def list_tools(self) -> list[Tool]:
        return [Tool(name=spec["name"], description=spec.get("description"),
                     input_schema=spec["input_schema"]) for spec in self.state.tools]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult:
        state = self.state
        if state.session_id is None:
            return _error("this rollout has no open ORS session")
        if state.finished:
            return _error("the episode is over: no further tool calls are taken")
        backend = shared_backend(state.connection, keepalive=False)
        try:
            result = await backend.call(state.env_name, state.session_id, name, arguments or {})
        except OrsError as exc:
            logger.warning("ORS tool call %r failed: %s", name, exc)
            return _error(f"the tool {name!r} failed: {exc.message}")
        state.record(result)
        if isinstance(result, RunToolSuccess):
            content = blocks_as_mcp(result.output.blocks) or [TextContent(text="")]
            return CallToolResult(content=list(content), is_error=False)
        return _error(result.error)


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text)], is_error=True)


if __name__ == "__main__":
    OrsToolset.run()
