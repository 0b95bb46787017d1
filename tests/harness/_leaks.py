"""What a harness episode may leave open, counted: MCP endpoints, ORS sessions, capture
sessions."""

from __future__ import annotations

from typing import Any, NamedTuple


class Open(NamedTuple):
    endpoints: int
    ors_sessions: int
    capture_sessions: int


def count(runner: Any, backend: Any, gateway: Any) -> Open:
    """The endpoints of ``runner``, the sessions of ``backend`` (a shared
    ``AsyncLocalBackend``) and the capture sessions of ``gateway`` open now."""
    return Open(len(runner.mcp.endpoints), len(backend.open_sessions), len(gateway.sessions))
