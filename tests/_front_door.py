"""A real HTTP front door, as a hosted platform puts before its environment servers.

``FrontDoor`` is an ASGI app (serve it with ``UvicornThread``) that forwards
requests with httpx to the SDK servers of its deployments, streaming answers
(SSE included) through as they arrive, and enforces what a hosted gateway
enforces:

- ``X-API-Key`` must be the door's key: else 401 (the key is never forwarded);
- ``X-Deployment`` picks the upstream server: an unknown one is 404
  "Deployment not found."; a request without it goes where its session lives;
- session ids are the door's: ``POST /create_session`` issues them (SSE,
  ``task_id`` then ``end``); any other request needs one it issued (404 else),
  except ``/health``; ``/delete_session`` forgets it;
- with ``rate``: a token bucket per API key admits ``rate`` requests a second
  (bursts up to ``burst``, default ``rate``; ``tokens`` in it at the key's first
  request, default ``burst``: 0 is a key whose budget is spent, so its first request
  is limited however fast or slow requests arrive); a request it has no token for is
  answered 429 with an honest ``Retry-After`` (the whole seconds until a token
  is due, at least 1) and spends none; ``admitted`` and ``limited`` count them;
- every ``rate_limit_every``-th request is answered 429 with ``Retry-After``;
- as a CDN may: with ``require_user_agent`` a request without ``User-Agent`` is
  refused 403 with an HTML page; the next ``bad_gateway`` tool calls are
  answered nginx's HTML ``502 Bad Gateway`` (the call never reaches a server);
  the next ``cut_after_task_id`` tool-call streams are cut right after their
  ``task_id`` event (the tool runs on; a resume finds it by that id).

Every request is recorded (method, path, lower-cased headers, status) in
``seen``, so tests compare what clients send. Redirects from upstream (the
SDK's 308 to its default environment) pass through with their relative
``Location``, so clients follow them back through the door.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["FrontDoor", "Seen"]

#: Headers that describe one hop, not the message: never forwarded either way.
_HOP = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "content-length",
                  "te", "upgrade", "proxy-connection"})


class _Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` kept."""

    def __init__(self, rate: float, burst: float, tokens: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = tokens
        self.last = time.monotonic()

    def take(self) -> float:
        """0 if a token was taken, else the seconds until one is due."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


@dataclass(frozen=True)
class Seen:
    """One request the door received, and the status it answered."""

    method: str
    path: str
    headers: dict[str, str]
    status: int


class FrontDoor:
    """The ASGI app: key check, rate limit, session ids, routing by deployment."""

    def __init__(
        self,
        deployments: Mapping[str, str],
        api_key: str,
        *,
        rate_limit_every: int | None = None,
        retry_after: int = 1,
        require_user_agent: bool = False,
        rate: float | None = None,
        burst: float | None = None,
        tokens: float | None = None,
    ) -> None:
        self.deployments = dict(deployments)
        self.api_key = api_key
        self.rate_limit_every = rate_limit_every
        self.retry_after = retry_after
        self.require_user_agent = require_user_agent
        self.rate, self.burst, self.tokens = rate, burst, tokens
        self.buckets: dict[str, _Bucket] = {}
        self.admitted = 0
        self.bad_gateway = 0
        self.cut_after_task_id = 0
        self.issued: dict[str, str] = {}  # session id -> deployment
        self.seen: list[Seen] = []
        self.count = 0
        self.limited = 0
        self._lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None

    def burst_size(self) -> float:
        """The requests a full bucket admits at once (0 without a rate)."""
        if self.rate is None:
            return 0.0
        return self.rate if self.burst is None else self.burst

    def clear(self) -> None:
        """Forget the recorded requests (issued session ids stay valid)."""
        with self._lock:
            self.seen.clear()

    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        method, path = scope["method"], scope["path"]
        body = await _read_body(receive)

        async def send_recorded(message: dict[str, Any]) -> None:
            # Recorded before the answer leaves: a client that has its answer finds it here.
            if message["type"] == "http.response.start":
                with self._lock:
                    self.seen.append(Seen(method, path, headers, message["status"]))
            await send(message)

        await self._handle(scope, method, path, headers, body, send_recorded)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._client = httpx.AsyncClient(timeout=None, follow_redirects=False)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _handle(
        self, scope: dict[str, Any], method: str, path: str, headers: dict[str, str],
        body: bytes, send: Any,
    ) -> int:
        if self.require_user_agent and not headers.get("user-agent"):
            return await _html(send, 403, "403 Forbidden")
        if headers.get("x-api-key") != self.api_key:
            return await _json(send, 401, "Missing or invalid API key")
        with self._lock:
            self.count += 1
            limited = bool(self.rate_limit_every) and self.count % self.rate_limit_every == 0
            retry_after = self.retry_after
            if not limited and self.rate is not None:
                bucket = self.buckets.get(self.api_key)
                if bucket is None:
                    burst = self.burst_size()
                    start = burst if self.tokens is None else self.tokens
                    bucket = self.buckets[self.api_key] = _Bucket(self.rate, burst, start)
                wait = bucket.take()
                limited = wait > 0
                retry_after = max(1, math.ceil(wait))
            self.limited += limited
            self.admitted += not limited
        if limited:
            return await _json(send, 429, "Too many requests",
                               {"retry-after": str(retry_after)})
        deployment = headers.get("x-deployment")
        if deployment is not None and deployment not in self.deployments:
            return await _json(send, 404, "Deployment not found.")
        if path == "/create_session":
            if deployment is None:
                return await _json(send, 400, "X-Deployment header is required")
            sid = f"door-{uuid.uuid4().hex}"
            with self._lock:
                self.issued[sid] = deployment
            stream = f"event: task_id\r\ndata: {sid}\r\n\r\nevent: end\r\ndata: \r\n\r\n"
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
            await send({"type": "http.response.body", "body": stream.encode()})
            return 200
        sid = headers.get("x-session-id")
        if sid is None and path != "/health":
            return await _json(send, 400, "X-Session-ID header is required; create one "
                                          "through /create_session")
        if sid is not None:
            owner = self.issued.get(sid)
            if owner is None:
                return await _json(send, 404, "Unknown session id; session ids are issued "
                                              "by /create_session")
            if deployment is not None and deployment != owner:
                return await _json(send, 400, "the session belongs to another deployment")
            deployment = owner
        if deployment is None:
            return await _json(send, 400, "X-Deployment header is required")
        if path == "/delete_session":
            with self._lock:
                self.issued.pop(sid or "", None)
        cut = bad = False
        if path.endswith("/call"):
            with self._lock:
                bad = self.bad_gateway > 0
                self.bad_gateway -= bad
                cut = (not bad and self.cut_after_task_id > 0
                       and json.loads(body).get("task_id") is None)
                self.cut_after_task_id -= cut
        if bad:
            return await _html(send, 502, "502 Bad Gateway")
        return await self._forward(scope, self.deployments[deployment], headers, body, send,
                                   cut_after_task_id=cut)

    async def _forward(
        self, scope: dict[str, Any], upstream: str, headers: dict[str, str], body: bytes,
        send: Any, cut_after_task_id: bool = False,
    ) -> int:
        assert self._client is not None
        url = upstream + scope["path"]
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        sent = {k: v for k, v in headers.items() if k not in _HOP and k != "x-api-key"}
        request = self._client.build_request(scope["method"], url, headers=sent, content=body)
        response = await self._client.send(request, stream=True)
        try:
            out = [(k.encode("latin-1"), v.encode("latin-1"))
                   for k, v in response.headers.multi_items() if k.lower() not in _HOP]
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": out})
            seen = b""
            async for raw in response.aiter_raw():
                await send({"type": "http.response.body", "body": raw, "more_body": True})
                seen += raw
                if cut_after_task_id and b"event: task_id" in seen and seen.endswith(b"\r\n\r\n"):
                    raise _Cut("the door cut the stream after its task_id event")
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()
        return response.status_code


class _Cut(ConnectionError):
    """Raised mid-answer: the server closes the connection, as a dropped proxy would."""


async def _html(send: Any, status: int, title: str) -> int:
    page = (f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
            f"<center><h1>{title}</h1></center>\r\n<hr><center>nginx</center>\r\n"
            "</body>\r\n</html>\r\n")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": page.encode()})
    return status


async def _read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _json(send: Any, status: int, detail: str, extra: dict[str, str] | None = None) -> int:
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps({"detail": detail}).encode()})
    return status
