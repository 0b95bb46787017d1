"""A gateway in another process, reached through its session API (for remote workers).

:class:`GatewayClient` offers what :class:`~ors_gym.harness.HarnessRunner` asks of a
:class:`~ors_gym.gateway.Gateway` (open a capture session, read its trajectory,
close it with the episode's rewards, drop it) over ``POST /sessions``,
``GET /sessions/SID``, ``GET /sessions/SID/status``, ``POST /sessions/SID/close`` and
``DELETE /sessions/SID``, so a runner on a Ray worker or another machine records
through one shared gateway (a turn refused for a full context included).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import httpx

from ors_gym.gateway import SessionInfo, SessionStatus
from ors_gym.tokens import Trajectory

__all__ = ["GatewayClient"]


class GatewayClient:
    """The session API of the gateway served at ``url``; ``model``: the model name
    harnesses are handed; ``admin_key``: the gateway's ``--admin-key-env`` key, if any."""

    def __init__(self, url: str, *, model: str, admin_key: str | None = None,
                 timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.model = model
        headers = {"Authorization": f"Bearer {admin_key}"} if admin_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._open: set[str] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # the admin key is a credential: never shown
        return f"GatewayClient(url={self.url!r}, model={self.model!r})"

    def open_session(self) -> SessionInfo:
        data = self._call("POST", "/sessions").json()
        with self._lock:
            self._open.add(data["id"])
        return SessionInfo(data["id"], data["api_key"], data["openai_base_url"],
                           data["anthropic_base_url"])

    def trajectory(self, sid: str) -> Trajectory:
        return Trajectory.from_dict(self._call("GET", f"/sessions/{sid}").json())

    def status(self, sid: str) -> SessionStatus:
        data = self._call("GET", f"/sessions/{sid}/status").json()
        return SessionStatus(**data)

    def close_session(self, sid: str, rewards: Sequence[float] = (), *,
                      stop_reason: str = "completed") -> Trajectory:
        body = {"rewards": [float(r) for r in rewards], "stop_reason": stop_reason}
        return Trajectory.from_dict(self._call("POST", f"/sessions/{sid}/close",
                                               json=body).json())

    def drop_session(self, sid: str) -> None:
        self._call("DELETE", f"/sessions/{sid}")
        with self._lock:
            self._open.discard(sid)

    @property
    def sessions(self) -> list[str]:
        """The sessions this client opened and has not dropped."""
        with self._lock:
            return list(self._open)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"the gateway at {self.url} refused {method} {path}: "
                               f"{response.status_code} {response.text[:300]}")
        return response
