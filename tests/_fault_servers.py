"""Real loopback servers that misbehave on purpose, for HTTP-backend fault tests.

- ``FaultyApp`` wraps an ASGI app (the SDK server's): it answers planned
  faults (503 "starting", 500, 502, wrong content type, a stall) for matching
  paths, passes everything else through, and records every request it sees.
- ``UvicornThread`` serves any ASGI app on 127.0.0.1, port 0, in a thread.
- ``CuttingProxy`` is a TCP proxy that cuts one connection when a marker
  passes: after the ``task_id`` event of a tool-call stream (the call must be
  resumed), or as a request goes out (the call must not be resent).
- ``ForwardProxy`` is a tiny HTTP forward proxy (absolute-form requests to
  ``http://`` URLs, one request per connection) that records what it forwarded.
- ``FastReaper`` reaps idle sessions of a running ``ServerThread`` after
  ``idle`` seconds instead of 900, with the SDK's own ``_delete_session``,
  on the server's event loop.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import uvicorn

__all__ = [
    "CuttingProxy",
    "FastReaper",
    "Fault",
    "FaultyApp",
    "ForwardProxy",
    "UvicornThread",
    "json_body",
    "wait_for",
]


def wait_for(condition: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    """Poll ``condition`` until true; fail after ``timeout`` seconds (a bounded wait)."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        tick.wait(0.02)


# -- ASGI fault injection --------------------------------------------------------------


@dataclass
class Fault:
    """Answer requests whose path ends with ``path_suffix`` ``times`` times.

    The first ``skip`` matching requests pass through untouched. With
    ``stall`` the request is held until ``FaultyApp.release()`` (at most 10 s)
    and then passed through.
    """

    path_suffix: str
    status: int = 503
    times: int = 1
    skip: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"detail": "injected fault"}'
    content_type: str = "application/json"
    stall: bool = False


class FaultyApp:
    """ASGI middleware that injects ``Fault``s and counts requests per path."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.faults: list[Fault] = []
        self.hits: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._released = threading.Event()
        self._lock = threading.Lock()

    def add(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def reset(self) -> None:
        with self._lock:
            self.faults.clear()
            self.hits.clear()
            self.requests.clear()
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def _take(self, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and path.endswith(fault.path_suffix):
                    if fault.skip > 0:
                        fault.skip -= 1
                        return None
                    fault.times -= 1
                    return fault
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with self._lock:
            self.hits[path] += 1
            self.requests.append((path, headers))
        fault = self._take(path)
        if fault is not None and fault.stall:
            await asyncio.to_thread(self._released.wait, 10.0)
        elif fault is not None:
            raw_headers = [(b"content-type", fault.content_type.encode())]
            raw_headers += [(k.lower().encode(), v.encode()) for k, v in fault.headers.items()]
            await send({"type": "http.response.start", "status": fault.status,
                        "headers": raw_headers})
            await send({"type": "http.response.body", "body": fault.body})
            return
        await self.app(scope, receive, send)


def json_body(detail: str) -> bytes:
    return json.dumps({"detail": detail}).encode()


class UvicornThread:
    """Any ASGI app under uvicorn in a daemon thread on 127.0.0.1, port 0."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="fault-server",
                                        daemon=True)
        self.url = ""

    def __enter__(self) -> UvicornThread:
        self._thread.start()
        wait_for(lambda: self._server.started or not self._thread.is_alive(), 30.0,
                 "the fault server to start")
        if not self._server.started:
            raise RuntimeError("the fault server failed to start")
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


# -- TCP proxy that cuts a connection ---------------------------------------------------


class CuttingProxy:
    """A loopback TCP proxy to ``target_url`` that cuts one connection on a marker.

    ``cut_response_after``: when the server sends this marker, forward through
    the end of that SSE event, then close both sides. ``cut_request_on``: when
    the client sends this marker, close both sides without forwarding it.
    Either fires ``cuts`` times; ``sent`` holds every byte clients sent and
    ``connections`` counts the connections accepted.
    """

    def __init__(
        self,
        target_url: str,
        *,
        cut_response_after: bytes | None = None,
        cut_request_on: bytes | None = None,
        cuts: int = 1,
    ) -> None:
        host_port = target_url.split("://", 1)[1]
        host, _, port = host_port.partition(":")
        self.target = (host, int(port))
        self.cut_response_after = cut_response_after
        self.cut_request_on = cut_request_on
        self.cuts_left = cuts
        self.cuts_done = 0
        self.sent = bytearray()
        self.connections = 0  # accepted so far
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def _take_cut(self) -> bool:
        with self._lock:
            if self.cuts_left <= 0:
                return False
            self.cuts_left -= 1
            self.cuts_done += 1
            return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            threading.Thread(target=self._pump_requests, args=(client, upstream),
                             daemon=True).start()
            threading.Thread(target=self._pump_responses, args=(upstream, client),
                             daemon=True).start()

    @staticmethod
    def _cut(*socks: socket.socket) -> None:
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _pump_requests(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                with self._lock:
                    self.sent += data
                if self.cut_request_on and self.cut_request_on in data and self._take_cut():
                    self._cut(client, upstream)
                    return
                upstream.sendall(data)
        except OSError:
            pass
        self._cut(client, upstream)

    def _pump_responses(self, upstream: socket.socket, client: socket.socket) -> None:
        held = b""
        try:
            while data := upstream.recv(65536):
                marker = self.cut_response_after
                if marker and self.cuts_left > 0 and (held or marker in data):
                    held += data
                    start = held.find(marker)
                    end = held.find(b"\r\n\r\n", start)  # sse-starlette ends events with CRLF CRLF
                    if end < 0:
                        continue  # the rest of the event is still on its way
                    if self._take_cut():
                        client.sendall(held[: end + 4])
                        self._cut(client, upstream)
                        return
                    data, held = held, b""
                elif held:
                    data, held = held + data, b""
                client.sendall(data)
        except OSError:
            pass
        self._cut(client, upstream)

    def count(self, marker: bytes) -> int:
        """How many times clients sent ``marker`` (e.g. a request line)."""
        with self._lock:
            return bytes(self.sent).count(marker)

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            socks, self._sockets = self._sockets, []
        self._cut(*socks)

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# -- a forward proxy ----------------------------------------------------------------------


class ForwardProxy:
    """An HTTP forward proxy on 127.0.0.1 for ``http://`` URLs, as ``HTTP_PROXY`` names one.

    Each connection carries one request in absolute form (``GET http://host:port/path``):
    it is sent on to that origin in origin form with ``Connection: close``, and the
    answer streamed back until the origin closes. ``seen`` lists ``(method, url)``.
    """

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="forward-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            data = b""
            while b"\r\n\r\n" not in data:
                piece = client.recv(65536)
                if not piece:
                    return
                data += piece
            head, _, body = data.partition(b"\r\n\r\n")
            line, *fields = head.decode("latin-1").split("\r\n")
            method, url, version = line.split(" ")
            headers = [f for f in fields if f.split(":")[0].strip().lower()
                       not in ("connection", "proxy-connection", "keep-alive")]
            length = next((int(f.split(":", 1)[1]) for f in headers
                           if f.split(":")[0].strip().lower() == "content-length"), 0)
            while len(body) < length:
                body += client.recv(65536)
            with self._lock:
                self.seen.append((method, url))
            rest = url.split("://", 1)[1]
            host_port, _, path = rest.partition("/")
            host, _, port = host_port.partition(":")
            with socket.create_connection((host, int(port or 80))) as upstream:
                request = "\r\n".join([f"{method} /{path} {version}", *headers,
                                        "Connection: close", "", ""])
                upstream.sendall(request.encode("latin-1") + body)
                while answer := upstream.recv(65536):
                    client.sendall(answer)

    def close(self) -> None:
        self._listener.close()

    def __enter__(self) -> ForwardProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# -- a fast reaper on the SDK server's loop ------------------------------------------------


class FastReaper:
    """Deletes sessions idle for more than ``idle`` s, as the SDK's reaper does after 900 s.

    Runs on the server's own event loop (found through the SDK's reaper task)
    and uses the SDK's ``_delete_session``, so a reaped session looks exactly
    like one the server reaped. ``sweeps`` counts passes; ``last_sweep`` is the
    ``time.monotonic()`` of the latest one.
    """

    def __init__(self, server_thread: Any, idle: float = 1.0, interval: float = 0.05) -> None:
        self.sdk = server_thread.sdk_server
        self.idle = idle
        self.interval = interval
        self.sweeps = 0
        self.last_sweep = time.monotonic()
        self.reaped: list[str] = []
        self._future: Future[None] | None = None

    async def _run(self) -> None:
        from openreward.environments.server import _delete_session

        sdk = self.sdk
        while True:
            await asyncio.sleep(self.interval)
            now = time.monotonic()
            stale = [sid for sid, ts in list(sdk._last_ping.items()) if now - ts > self.idle]
            for sid in stale:
                await _delete_session(sid, sdk._active_envs, sdk._active_toolsets,
                                      sdk._last_ping, sdk._setup_tasks, sdk._ready,
                                      sdk._setup_errors)
                self.reaped.append(sid)
            self.sweeps += 1
            self.last_sweep = now

    def __enter__(self) -> FastReaper:
        wait_for(lambda: self.sdk._reaper_task is not None, 10.0, "the SDK reaper task")
        loop = self.sdk._reaper_task.get_loop()
        self._future = asyncio.run_coroutine_threadsafe(self._run(), loop)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._future is not None:
            self._future.cancel()
