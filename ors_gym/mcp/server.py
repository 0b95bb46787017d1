"""Many ORS sessions served as MCP endpoints by one streamable-HTTP server.

:class:`McpServer` is one ASGI app (the official ``mcp`` SDK's low-level server
and its streamable-HTTP session manager) serving every endpoint it opened at
``/mcp/<id>``: the URL names the ORS session, so one process serves many at once.
:meth:`McpServer.open` resets an ``AsyncOrsEnv`` (local, served or hosted: any of
ors_gym's backends) and gives its :class:`~ors_gym.mcp.McpEndpoint`. An endpoint is
closed (its ORS session released) when its owner closes it, when its last client
disconnects (``release_on_disconnect``) or when it has been idle ``idle_timeout``
seconds (read on ``clock``, so a test moves time by hand; :meth:`reap_idle` closes
those, and a background task calls it while serving).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from mcp import types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from ors_gym.mcp._content import CALL_ID_KEYS
from ors_gym.mcp.endpoint import McpEndpoint

__all__ = ["McpServer"]

logger = logging.getLogger("ors_gym")

_SESSION_HEADER = "mcp-session-id"


class McpServer:
    """ORS sessions as MCP endpoints (see the module). ``idle_timeout``: seconds
    without a request after which an endpoint is closed (None: never);
    ``release_on_disconnect``: close an endpoint when its last MCP client ends its
    session (a runner that still needs the session after its harness exits passes
    False); ``watch_tools``: read the session's tools again after each call and tell
    the clients when they changed; ``clock``: the time source, seconds."""

    def __init__(self, *, idle_timeout: float | None = 600.0,
                 release_on_disconnect: bool = True, watch_tools: bool = False,
                 call_id_keys: tuple[str, ...] = CALL_ID_KEYS,
                 clock: Callable[[], float] = time.monotonic, name: str = "ors-gym") -> None:
        if idle_timeout is not None and not idle_timeout > 0:
            raise ValueError(f"idle_timeout must be a positive number of seconds or None, "
                             f"got {idle_timeout!r}")
        self.idle_timeout = idle_timeout
        self.release_on_disconnect = release_on_disconnect
        self.watch_tools = watch_tools
        self.call_id_keys = call_id_keys
        self.clock = clock
        self.url: str | None = None
        self._endpoints: dict[str, McpEndpoint] = {}
        self._mcp: Server[Any, Any] = _Server(name)
        self._register(self._mcp)
        self._manager: StreamableHTTPSessionManager | None = None

    # -- endpoints --------------------------------------------------------------------
    async def open(self, env: Any, *, seed: int | None = None,
                   options: Mapping[str, Any] | None = None) -> McpEndpoint:
        """Reset ``env`` (an ``AsyncOrsEnv``; ``seed`` and ``options`` as its ``reset``
        takes them) and serve its session as a new endpoint. The endpoint owns ``env``."""
        if self.url is None:
            raise RuntimeError("the MCP server is not serving: open endpoints inside "
                               "`async with server.serve():`")
        try:
            _, info = await env.reset(seed=seed, options=dict(options or {}))
        except BaseException:
            await env.close()
            raise
        eid = secrets.token_urlsafe(12)
        endpoint = McpEndpoint(eid, env, info, url=f"{self.url}/mcp/{eid}", clock=self.clock)
        self._endpoints[eid] = endpoint
        return endpoint

    async def close(self, eid: str, reason: str = "closed") -> None:
        """Close endpoint ``eid`` (its ORS session released); unknown ids are ignored."""
        endpoint = self._endpoints.pop(eid, None)
        if endpoint is not None:
            await endpoint.close(reason)

    async def reap_idle(self) -> list[str]:
        """Close the endpoints idle for ``idle_timeout`` or more; their ids."""
        if self.idle_timeout is None:
            return []
        idle = [e.id for e in list(self._endpoints.values())
                if e.idle_for() >= self.idle_timeout]
        for eid in idle:
            logger.info("an MCP endpoint was closed after %s s idle", self.idle_timeout)
            await self.close(eid, "idle")
        return idle

    @property
    def endpoints(self) -> dict[str, McpEndpoint]:
        """The endpoints open now, by id (a copy)."""
        return dict(self._endpoints)

    # -- serving ----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        """Serve on the running event loop (uvicorn); yields the base URL. On exit every
        endpoint is closed."""
        import uvicorn

        if self._manager is not None:
            raise RuntimeError("this McpServer is serving already; make another one")
        self._manager = StreamableHTTPSessionManager(self._mcp, session_idle_timeout=None)
        logging.getLogger("mcp.server.streamable_http").addFilter(_NOISE)  # once: a set
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)  # connections queue from here on, before uvicorn accepts
        bound = sock.getsockname()
        config = uvicorn.Config(self._asgi, interface="asgi3", log_level="warning",
                                access_log=False, lifespan="off", timeout_graceful_shutdown=5)
        server = uvicorn.Server(config)
        self.url = f"http://{bound[0]}:{bound[1]}"
        try:
            async with self._manager.run():
                serving = asyncio.create_task(server.serve(sockets=[sock]))
                reaper = asyncio.create_task(self._reap_forever())
                try:
                    yield self.url
                finally:
                    reaper.cancel()
                    for eid in list(self._endpoints):
                        await self.close(eid, "server_stopped")
                    server.should_exit = True
                    await serving
        finally:
            sock.close()
            self.url = None

    async def _reap_forever(self) -> None:
        if self.idle_timeout is None:
            return
        period = min(self.idle_timeout / 4, 5.0)
        while True:
            await asyncio.sleep(period)  # a schedule, not a synchronisation
            try:
                await self.reap_idle()
            except Exception as exc:
                logger.warning("closing idle MCP endpoints failed: %s: %s",
                               type(exc).__name__, exc)

    async def _asgi(self, scope: Any, receive: Any, send: Any) -> None:
        """Route ``/mcp/<id>`` to the session manager; anything else is 404."""
        from starlette.responses import JSONResponse

        if scope["type"] != "http":
            return
        parts = scope["path"].strip("/").split("/")
        endpoint = (self._endpoints.get(parts[1]) if len(parts) == 2 and parts[0] == "mcp"
                    else None)
        if endpoint is None:
            await JSONResponse({"error": "no such MCP endpoint: the URL names an ORS "
                                         "session that was never opened or is closed"},
                               status_code=404)(scope, receive, send)
            return
        endpoint.touch()
        assert self._manager is not None
        scope = {**scope, "ors_endpoint": endpoint.id}
        await self._manager.handle_request(scope, receive, send)
        endpoint.touch()
        if scope["method"] == "DELETE":
            client = _header(scope, _SESSION_HEADER)
            endpoint.clients.pop(client or "", None)
            if self.release_on_disconnect and not endpoint.clients:
                await self.close(endpoint.id, "disconnected")

    # -- the MCP handlers -------------------------------------------------------------
    def _register(self, mcp: Server[Any, Any]) -> None:
        @mcp.list_tools()
        async def list_tools() -> list[types.Tool]:
            return self._current().mcp_tools()

        @mcp.call_tool(validate_input=False)
        async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            endpoint = self._current()
            meta = self._mcp.request_context.meta
            extra = meta.model_extra if meta is not None else None
            call_id = next((str(extra[k]) for k in self.call_id_keys
                            if extra and extra.get(k) is not None), None)
            out = await endpoint.call(name, arguments, call_id)
            if self.watch_tools and not endpoint.finished:
                try:
                    await endpoint.refresh_tools()
                except Exception as exc:  # the call ran: its result stands, never an error
                    logger.warning("reading an MCP endpoint's tools again after %s failed "
                                   "(the call's result is sent): %s: %s", name,
                                   type(exc).__name__, exc)
            return out


    def _current(self) -> McpEndpoint:
        """The endpoint the request in hand is for (and its client remembered)."""
        ctx = self._mcp.request_context
        request = ctx.request
        eid = request.scope.get("ors_endpoint") if request is not None else None
        endpoint = self._endpoints.get(eid or "")
        if endpoint is None:
            raise LookupError("this MCP endpoint is closed: its ORS session was released")
        client = request.headers.get(_SESSION_HEADER) if request is not None else None
        if client:
            endpoint.clients[client] = ctx.session
        return endpoint


class _ClosedStreamNoise(logging.Filter):
    """Drops the mcp SDK's traceback for a client that ended its session while its
    notification stream was open (the stream's reader is closed under it: an ordinary
    disconnect, not a failure); every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (record.getMessage() == "Error in standalone SSE writer"
                    and type(exc).__name__ == "ClosedResourceError")


_NOISE = _ClosedStreamNoise()


class _Server(Server[Any, Any]):
    """The low-level server, announcing ``tools.listChanged`` (the tools may change)."""

    def create_initialization_options(self, notification_options: Any = None,
                                      experimental_capabilities: Any = None) -> Any:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities)


def _header(scope: Mapping[str, Any], name: str) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.decode("latin-1").lower() == name:
            return str(value.decode("latin-1"))
    return None
