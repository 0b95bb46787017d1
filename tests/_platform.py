"""A stand-in for the OpenReward platform's API host, recording every request it receives.

``Platform`` is an ASGI app (serve it with ``UvicornThread``) answering the API
endpoints the SDK's client and ors_gym send to:

- ``GET /v1/environments/{owner}/{name}/required-secrets`` -> ``{"secrets": [...]}``;
- ``GET /v1/environments/{owner}/{name}/task-difficulty`` -> ``{"tasks": [...]}`` (the
  rows given, filtered by ``split`` when asked);
- ``GET /v1/environments/{owner}/{name}`` -> ``{"id": ...}``; ``.../variants`` -> a list;
- ``POST /v1/rollouts`` -> ``{"ok": true}``, its events kept in ``events``.

The key endpoints demand ``X-API-Key`` equal to ``api_key`` (401 else); the
environment lookups do not (the SDK sends them without it). ``fail_rollouts``
answers the next N rollout posts 503 with ``Retry-After: 0``; while ``hold`` is
set (a ``threading.Event`` that is clear), rollout posts wait for it before
answering. ``refuse`` (a status and a JSON answer) answers every request whose path
starts with ``refuse_prefix`` with it (402 for an account without credits, 500 for the
API failing); with ``create_quotes_env``, ``/create`` fails 500 quoting the ``env`` its
``/create_session`` carried (an environment that reports what it read). Any other path
goes to ``sessions`` (e.g. a ``FrontDoor``), so one address serves the session host too.
Every request (method, path, query, lower-cased headers, body) is kept in ``seen``, in
arrival order.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["DEPLOYMENT", "KEY", "Platform", "Recorded"]

#: The key the tests' platform and front door accept (random per run).
KEY = "ork-" + secrets.token_hex(16)
#: The deployment the tests' front door serves.
DEPLOYMENT = "Acme/tools"

_ENV = re.compile(r"^/v1/environments/(?P<owner>[^/]+)/(?P<name>[^/]+)(?P<rest>/[\w-]+)?$")


@dataclass(frozen=True)
class Recorded:
    """One request as it arrived."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Platform:
    """The ASGI app: the API endpoints above, and ``sessions`` for the rest."""

    def __init__(self, api_key: str, sessions: Any = None) -> None:
        self.api_key = api_key
        self.sessions = sessions
        self.required: dict[str, list[str]] = {}
        self.difficulty: dict[str, list[dict[str, Any]]] = {}
        self.ids: dict[str, str] = {}
        self.variants: dict[str, list[dict[str, str]]] = {}
        self.events: list[dict[str, Any]] = []
        self.fail_rollouts = 0
        self.hold: threading.Event | None = None
        self.refuse: tuple[int, Any] | None = None
        self.refuse_prefix = "/"
        self.create_quotes_env = False
        self.seen: list[Recorded] = []
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.seen.clear()
            self.events.clear()

    def requests(self, prefix: str = "") -> list[Recorded]:
        with self._lock:
            return [r for r in self.seen if r.path.startswith(prefix)]

    def received_events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            if self.sessions is not None:
                await self.sessions(scope, receive, send)
                return
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        with self._lock:
            self.seen.append(Recorded(scope["method"], scope["path"], query, headers, body))
        if self.refuse is not None and scope["path"].startswith(self.refuse_prefix):
            await _send_json(send, *self.refuse)
            return
        if self.create_quotes_env and scope["path"] == "/create":
            created = [r.json() for r in self.requests("/create_session") if r.body]
            read = (created or [{}])[-1].get("env", {})
            await _send_json(send, 500, {"detail": f"setup() failed with the variables {read}"})
            return
        if scope["path"].startswith("/v1/"):
            status, answer, extra = await self._api(scope["method"], scope["path"], query,
                                                    headers, body)
            await _send_json(send, status, answer, extra)
            return
        if self.sessions is None:
            await _send_json(send, 404, {"detail": "no session host here"})
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.sessions(scope, replay, send)

    async def _api(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
        body: bytes,
    ) -> tuple[int, Any, dict[str, str]]:
        keyed = headers.get("x-api-key") == self.api_key
        if method == "POST" and path == "/v1/rollouts":
            if not keyed:
                return 401, {"detail": "Missing or invalid API key"}, {}
            if self.hold is not None:
                await asyncio.to_thread(self.hold.wait)
            with self._lock:
                failing = self.fail_rollouts > 0
                self.fail_rollouts -= failing
                if not failing:
                    self.events.extend(json.loads(body)["events"])
            if failing:
                return 503, {"detail": "try again"}, {"retry-after": "0"}
            return 200, {"ok": True}, {}
        found = _ENV.match(path)
        if method != "GET" or found is None:
            return 404, {"detail": "Not Found"}, {}
        deployment = f"{found['owner']}/{found['name']}"
        rest = found["rest"]
        if rest is None:
            return (200, {"id": self.ids[deployment]}, {}) if deployment in self.ids else (
                404, {"detail": "Environment not found"}, {})
        if rest == "/variants":
            return 200, self.variants.get(deployment, []), {}
        if not keyed:
            return 401, {"detail": "Missing or invalid API key"}, {}
        if rest == "/required-secrets":
            return 200, {"secrets": self.required.get(deployment, [])}, {}
        if rest == "/task-difficulty":
            rows = self.difficulty.get(deployment, [])
            if "split" in query:
                rows = [r for r in rows if r.get("split") == query["split"]]
            return 200, {"tasks": rows}, {}
        return 404, {"detail": "Not Found"}, {}


async def _send_json(send: Any, status: int, answer: Any, extra: dict[str, str] | None = None
                     ) -> None:
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(answer).encode()})
