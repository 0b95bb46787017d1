"""An ORS session as an MCP server: any harness that takes MCP tools plays an ORS env.

:class:`McpServer` serves ORS sessions (local, served or hosted, through any of
ors_gym's backends) as streamable-HTTP MCP endpoints, one per session, many at
once in one process; :class:`McpEndpoint` is one of them (its tools with their JSON
schemas, the terminal tool callable, each call an ORS call whose blocks are the MCP
content and whose reward and ``finished`` are in ``_meta``). ``python -m
ors_gym.mcp URL`` relays an endpoint over stdio, for a harness that takes only a
command. Needs the ``mcp`` extra.
"""

from __future__ import annotations

from ors_gym.mcp._content import CALL_ID_KEYS, META_PREFIX
from ors_gym.mcp.endpoint import McpEndpoint
from ors_gym.mcp.server import McpServer

__all__ = ["CALL_ID_KEYS", "META_PREFIX", "McpEndpoint", "McpServer"]
