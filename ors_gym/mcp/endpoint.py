"""One ORS session behind one MCP endpoint: its tools, its calls, its lifetime.

An :class:`McpEndpoint` holds an ``AsyncOrsEnv`` reset to one task. Each MCP
``tools/call`` is one ORS step of one call (run one at a time, in arrival order),
recorded with the harness's own id for it (:attr:`McpEndpoint.calls`) and its reward
(:attr:`McpEndpoint.rewards`). When a call finishes the episode, the ORS session is
released at once; the endpoint stays to answer later calls with the "episode ended"
error until it is closed (its harness disconnected, it went idle, or its owner closed
it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from mcp import types

from ors_gym.actions import ToolCall
from ors_gym.mcp._content import ended_result, mcp_tools, result
from ors_gym.protocol import Block, ListToolsOutput, TextBlock

__all__ = ["McpEndpoint"]

logger = logging.getLogger("ors_gym")


class McpEndpoint:
    """One ORS session served as MCP at :attr:`url` (see the module).

    ``env``: an ``AsyncOrsEnv`` already reset (its session open); the endpoint owns it
    and closes it when the episode ends or the endpoint is closed. ``info``: the reset's
    info (the prompt's blocks, the task).
    """

    def __init__(self, eid: str, env: Any, info: dict[str, Any], *, url: str,
                 clock: Callable[[], float]) -> None:
        self.id = eid
        self.env = env
        self.url = url
        self.task_spec: dict[str, Any] = dict(info.get("task_spec") or {})
        self.prompt_blocks: list[Block] = list(info.get("blocks") or [])
        self.tools: ListToolsOutput = env.tools
        #: Each ORS call run: ``id`` (the harness's, else ``call_<step>_0``), ``name``,
        #: ``input``, ``ok``, ``reward``, ``finished``, ``error``.
        self.calls: list[dict[str, Any]] = []
        #: Each ORS step's reward, in order (the episode's return is their sum).
        self.rewards: list[float] = []
        self.finished = False
        #: Why the endpoint was closed (``"finished"`` is kept until then), or None.
        self.closed_reason: str | None = None
        self.clients: dict[str, Any] = {}  # MCP session id -> its ServerSession
        self._clock = clock
        self.last_active = clock()
        self._lock = asyncio.Lock()
        self._env_open = True
        self.closed = asyncio.Event()
        #: Set when a call finishes the episode.
        self.ended = asyncio.Event()

    @property
    def prompt(self) -> str:
        """The task's prompt as text (its text blocks, joined)."""
        return "\n\n".join(b.text for b in self.prompt_blocks if isinstance(b, TextBlock))

    def touch(self) -> None:
        """Mark the endpoint active now (its idle time restarts)."""
        self.last_active = self._clock()

    def idle_for(self) -> float:
        """Seconds since the endpoint was last active."""
        return self._clock() - self.last_active

    def mcp_tools(self) -> list[types.Tool]:
        """The session's tools as MCP lists them (the terminal tool included)."""
        return mcp_tools(self.tools)

    async def call(self, name: str, arguments: dict[str, Any],
                   call_id: str | None = None) -> types.CallToolResult:
        """Run one ORS call (after the episode ended: the "episode ended" error)."""
        async with self._lock:
            self.touch()
            if self.finished or self.closed_reason is not None:
                return ended_result(call_id)
            try:
                _, reward, terminated, truncated, info = await self.env.step(
                    ToolCall(name, dict(arguments), call_id))
            except Exception as exc:  # the harness sees MCP's error result; say it here
                logger.warning("an MCP endpoint's ORS call %s failed (ORS session %s): %s: %s",
                               name, self.env.session_id, type(exc).__name__, exc)
                raise
            self.touch()
            records = info.get("calls") or [{}]
            record = records[0]
            finished = bool(terminated or truncated)
            self.rewards.append(float(reward))
            self.calls.append({
                "id": record.get("id", call_id), "name": name, "input": dict(arguments),
                "ok": bool(record.get("ok", False)), "reward": float(reward),
                "finished": finished, "error": record.get("error") or info.get("error"),
            })
            if finished:
                self.finished = True
                self.ended.set()
                await self._release_env()
            return result(info.get("blocks") or [], reward=float(reward), finished=finished,
                          call_id=record.get("id", call_id),
                          ok=bool(record.get("ok", False)))

    async def refresh_tools(self) -> bool:
        """Read the session's tools again; when they changed, tell every connected
        client (``notifications/tools/list_changed``). True if they changed."""
        async with self._lock:
            if not self._env_open:
                return False
            env = self.env
            fresh = await env.backend.task_tools(env.env_name, env.session_id)
        if fresh == self.tools:
            return False
        self.tools = fresh
        for session in list(self.clients.values()):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a client gone meanwhile
                logger.debug("could not send tools/list_changed: %s", exc)
        return True

    async def close(self, reason: str = "closed") -> None:
        """Release the ORS session (if still open) and stop serving; safe twice."""
        if self.closed_reason is None:
            self.closed_reason = "finished" if self.finished else reason
        async with self._lock:
            await self._release_env()
        self.closed.set()

    async def _release_env(self) -> None:
        if self._env_open:
            self._env_open = False
            sid = self.env.session_id
            try:
                await self.env.close()
            except Exception as exc:
                # the endpoint's id is not logged: its URL is what grants access to it
                logger.warning("could not release an MCP endpoint's ORS session %s: %s: %s",
                               sid, type(exc).__name__, exc)

    @property
    def ors_open(self) -> bool:
        """Whether the endpoint's ORS session is still open."""
        return self._env_open

    def __repr__(self) -> str:
        return (f"McpEndpoint(calls={len(self.calls)}, "
                f"finished={self.finished}, closed={self.closed_reason!r})")
