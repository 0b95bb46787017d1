"""Hostile servers and a flaky proxy for reliability tests and the soak benchmark.

Complements ``tests/_fault_servers.py`` (whose ``UvicornThread``, ``wait_for``
and ``FastReaper`` are reused, not copied):

- ``HostileApp`` wraps a real SDK server's ASGI app and answers chosen paths
  with a *responder*: malformed SSE, broken JSON, wrong shapes, endless or
  huge streams, gzip bombs, redirect loops. Everything else passes through,
  so an ``OrsEnv`` can reset against the real server and then meet the hostile
  answer. Streaming responders stop on their own (client gone, byte or time
  bound), so no request loop outlives its test.
- ``HostileServer`` runs ``HostileApp(Server(envs).app)`` on 127.0.0.1:0.
- ``FlakyProxy`` is a loopback TCP proxy that can cut every Nth tool-call
  stream right after its ``task_id`` event (the call must be resumed), reject
  the next N connections (a short outage), or stop listening altogether and
  later listen again on the same port, in front of a new server.
- ``open_sockets()`` counts this process's socket file descriptors.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tests._fault_servers import UvicornThread

__all__ = [
    "FlakyProxy",
    "HostileApp",
    "HostileServer",
    "Responder",
    "answer",
    "gzip_bomb",
    "open_sockets",
    "png_bomb",
    "png_with_size",
    "redirect_loop",
    "redirect_to",
    "sse",
    "streamed",
]

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
#: An ASGI answer to one request: ``await responder(scope, receive, send)``.
Responder = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]

#: Hard bounds of any streaming responder, whatever the client does.
_STREAM_MAX_SECONDS = 30.0
_STREAM_MAX_BYTES = 2 * 1024**3


def open_sockets() -> int:
    """How many of this process's file descriptors are sockets (Linux /proc)."""
    count = 0
    fd_dir = "/proc/self/fd"
    for name in os.listdir(fd_dir):
        try:
            if os.readlink(os.path.join(fd_dir, name)).startswith("socket:"):
                count += 1
        except OSError:  # closed between listdir and readlink
            pass
    return count


# -- responders ---------------------------------------------------------------------------


def _headers(content_type: str, extra: dict[str, str] | None) -> list[tuple[bytes, bytes]]:
    raw = [(b"content-type", content_type.encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (extra or {}).items()]
    return raw


def answer(
    status: int,
    body: bytes,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Responder:
    """A fixed answer."""

    async def respond(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": _headers(content_type, headers)})
        await send({"type": "http.response.body", "body": body})

    return respond


def sse(body: bytes) -> Responder:
    """A fixed ``text/event-stream`` answer (events end with CRLF CRLF, as sse-starlette's)."""
    return answer(200, body, "text/event-stream")


def streamed(
    head: bytes,
    piece: bytes,
    *,
    total: int | None = None,
    tail: bytes = b"",
    content_type: str = "text/event-stream",
    status: int = 200,
    headers: dict[str, str] | None = None,
    interval: float = 0.0,
    max_seconds: float = _STREAM_MAX_SECONDS,
) -> Responder:
    """``head``, then ``piece`` repeated (``total`` bytes of it, or without end), then ``tail``.

    An endless stream stops when the client disconnects, or after ``max_seconds``
    (30) or 2 GiB: bounds of a hostile server we run ourselves, not limits the
    client may rely on.
    ``interval`` waits between pieces (e.g. a ``: ping`` comment every 50 ms).
    """

    async def respond(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            await send({"type": "http.response.start", "status": status,
                        "headers": _headers(content_type, headers)})
            await send({"type": "http.response.body", "body": head, "more_body": True})
            sent = 0
            limit = _STREAM_MAX_BYTES if total is None else total
            stop_at = time.monotonic() + max_seconds
            while sent < limit and not gone.is_set() and time.monotonic() < stop_at:
                chunk = piece if sent + len(piece) <= limit else piece[: limit - sent]
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                sent += len(chunk)
                await asyncio.sleep(interval)  # yields to the loop so a disconnect is seen
            await send({"type": "http.response.body", "body": tail})
        finally:
            watcher.cancel()

    return respond


def redirect_loop(status: int = 307) -> Responder:
    """Redirect every request to its own path (307 keeps the method and body)."""
    return redirect_to("", status)


def redirect_to(base_url: str, status: int = 307) -> Responder:
    """Redirect every request to the same path under ``base_url`` ("" for the same server)."""

    async def respond(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        query = scope.get("query_string") or b""
        location = base_url + scope["path"] + ("?" + query.decode() if query else "")
        await send({"type": "http.response.start", "status": status,
                    "headers": _headers("text/plain", {"location": location})})
        await send({"type": "http.response.body", "body": b"see elsewhere"})

    return respond


_GZIP_CACHE: dict[tuple[int, bytes, bytes], bytes] = {}


def gzip_bomb(
    decoded_bytes: int,
    content_type: str = "application/json",
    *,
    head: bytes = b"",
    filler: bytes = b" ",
) -> Responder:
    """``Content-Encoding: gzip``: a small body inflating to ``head`` + ``decoded_bytes`` of filler.

    The default filler (spaces) keeps the inflated text valid JSON whitespace, so
    only a size limit on the *decoded* answer, applied while inflating, stops it;
    for an SSE stream pass whole events as ``filler``.
    """
    key = (decoded_bytes, head, filler)
    body = _GZIP_CACHE.get(key)
    if body is None:
        comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
        block = filler * max(1, (1024 * 1024) // len(filler))
        parts = [comp.compress(head)]
        parts += [comp.compress(block) for _ in range(decoded_bytes // len(block))]
        parts.append(comp.flush())
        body = _GZIP_CACHE[key] = b"".join(parts)
    return answer(200, body, content_type, {"content-encoding": "gzip"})


# -- images -----------------------------------------------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF
    )


def png_with_size(width: int, height: int, idat: bytes = b"") -> bytes:
    """A grayscale PNG whose header declares ``width`` x ``height`` with ``idat`` as pixel data."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grayscale
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", idat)
            + _png_chunk(b"IEND", b""))


_BOMB_CACHE: dict[int, bytes] = {}


def png_bomb(side: int = 12_000) -> bytes:
    """A real decompression bomb: a valid ``side`` x ``side`` black PNG of a few hundred KB.

    Decoded it would take ``side**2`` bytes (144 MB by default); it is built row
    by row, so making it never holds the pixels either.
    """
    cached = _BOMB_CACHE.get(side)
    if cached is None:
        comp = zlib.compressobj(9)
        row = b"\x00" * (side + 1)  # filter byte + pixels
        idat = b"".join(comp.compress(row) for _ in range(side)) + comp.flush()
        cached = _BOMB_CACHE[side] = png_with_size(side, side, idat)
    return cached


# -- the hostile server ---------------------------------------------------------------------


@dataclass
class _Plan:
    suffix: str
    responder: Responder
    times: int | None


class HostileApp:
    """ASGI middleware: answer requests whose path ends with a planned suffix hostilely.

    ``plan(suffix, responder, times)`` answers the next ``times`` matching
    requests (``None``: all of them) with ``responder``; others pass through to
    the wrapped app. ``hits`` counts requests per path, ``hostile`` per suffix,
    ``answered`` the answers sent per ``(path, status)``.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.hits: Counter[str] = Counter()
        self.hostile: Counter[str] = Counter()
        self.answered: Counter[tuple[str, int]] = Counter()
        self._plans: list[_Plan] = []
        self._lock = threading.Lock()

    def plan(self, path_suffix: str, responder: Responder, times: int | None = 1) -> None:
        with self._lock:
            self._plans.append(_Plan(path_suffix, responder, times))

    def reset(self) -> None:
        with self._lock:
            self._plans.clear()
            self.hits.clear()
            self.hostile.clear()
            self.answered.clear()

    def _take(self, path: str) -> Responder | None:
        with self._lock:
            self.hits[path] += 1
            for plan in self._plans:
                if path.endswith(plan.suffix) and (plan.times is None or plan.times > 0):
                    if plan.times is not None:
                        plan.times -= 1
                    self.hostile[plan.suffix] += 1
                    return plan.responder
        return None

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        responder = self._take(path)

        async def counted_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                with self._lock:
                    self.answered[(path, message["status"])] += 1
            await send(message)

        await (responder or self.app)(scope, receive, counted_send)


class HostileServer:
    """A real SDK server for ``envs`` behind a ``HostileApp``, on 127.0.0.1:0."""

    def __init__(self, envs: Sequence[type | str]) -> None:
        from openreward.environments import Server

        from ors_gym.serving import load_environment_classes

        self.app = HostileApp(Server(load_environment_classes(list(envs))).app)
        self._thread = UvicornThread(self.app)
        self.url = ""

    def __enter__(self) -> HostileServer:
        self._thread.__enter__()
        self.url = self._thread.url
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._thread.__exit__(*exc_info)


# -- a flaky proxy ----------------------------------------------------------------------------


class FlakyProxy:
    """A loopback TCP proxy in front of ``target_url`` that fails on purpose.

    - ``cut_every=N``: every Nth ``event: task_id`` the server streams is
      forwarded through the end of its event, then both sides are closed: the
      tool runs on, and the client must resume the call by its task id (a
      resumed stream starts with the same event, and counts too). ``cuts``
      counts them; ``max_cuts`` stops cutting after that many.
    - ``reject_after_cut=n``: after each cut, also reset the next ``n``
      connections (the server stays unreachable for a moment).
    - ``reject(n)``: the next ``n`` connections are accepted and reset at once
      (a short outage); ``rejected`` counts them. The proxy heals by itself.
    - ``stop()``: close every connection and stop listening (the port refuses
      connections, as for a killed server). ``start(target_url)`` listens again
      on the same port, optionally in front of another server.
    """

    MARKER = b"event: task_id"

    def __init__(
        self,
        target_url: str,
        *,
        cut_every: int = 0,
        max_cuts: int | None = None,
        reject_after_cut: int = 0,
        port: int = 0,
    ) -> None:
        self.target = _host_port(target_url)
        self.cut_every = cut_every
        self.max_cuts = max_cuts
        self.reject_after_cut = reject_after_cut
        self.acks = 0  # task_id events seen
        self.cuts = 0
        self.rejected = 0
        self.connections = 0
        self._reject_next = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = port
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, target_url: str | None = None) -> None:
        """Listen (again) on ``self.port``; forward to ``target_url`` if given."""
        if target_url is not None:
            self.target = _host_port(target_url)
        # SO_REUSEADDR on POSIX; a deep backlog, for a thousand sessions connecting at once
        listener = socket.create_server(("127.0.0.1", self.port), backlog=1024)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="flaky-proxy",
                         daemon=True).start()

    def stop(self) -> None:
        """Stop listening and cut every connection."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            except OSError:
                pass
            listener.close()
        with self._lock:
            socks, self._sockets = self._sockets, set()
        for sock in socks:
            _close(sock)

    def reject(self, n: int) -> None:
        with self._lock:
            self._reject_next = n

    def __enter__(self) -> FlakyProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                refuse = self._reject_next > 0
                if refuse:
                    self._reject_next -= 1
                    self.rejected += 1
            if refuse:
                # SO_LINGER 0: close sends a RST, like a server that died mid-accept
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets |= {client, upstream}
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, upstream, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True),
                             daemon=True).start()

    def _should_cut(self) -> bool:
        with self._lock:
            self.acks += 1
            if self.cut_every <= 0 or self.acks % self.cut_every:
                return False
            if self.max_cuts is not None and self.cuts >= self.max_cuts:
                return False
            self.cuts += 1
            self._reject_next += self.reject_after_cut
            return True

    def _pump(self, src: socket.socket, dst: socket.socket, responses: bool) -> None:
        held = b""
        try:
            while data := src.recv(65536):
                if responses and self.cut_every > 0:
                    data = held + data
                    held = b""
                    start = data.find(self.MARKER)
                    if start >= 0:
                        end = data.find(b"\r\n\r\n", start)
                        if end < 0:
                            held = data  # the rest of the event is on its way
                            continue
                        if self._should_cut():
                            dst.sendall(data[: end + 4])
                            break
                    # (a marker split across two reads is rare; it is just not counted)
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._sockets -= {src, dst}
        _close(src)
        _close(dst)


def _host_port(url: str) -> tuple[str, int]:
    host, _, port = url.split("://", 1)[1].rstrip("/").partition(":")
    return host, int(port)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
