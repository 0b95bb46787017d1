"""A lean HTTP/1.1 connection pool over httpcore's own connection class.

``httpcore.AsyncConnectionPool`` re-examines every connection it holds when a
request starts and again when it ends, wakes the request through an event,
and reaches each connection through ``AsyncHTTPConnection``, whose lock
costs one more pass of the event loop per request: on a loop stepping
hundreds of sessions that work was a large share of the client's CPU.
``Http11Pool`` keeps idle connections per origin, most recently used first,
and hands a request to an idle one (checked as httpcore's pool checks it:
not expired, not closed by the server) or to a new
``httpcore.AsyncHTTP11Connection`` over ``AsyncioBackend`` (whose state lock
``_compat.httpcore`` makes one that takes no pass through the loop). HTTP/1.1
only, no proxies: what ORS servers speak. ``_pool.PooledTransport`` puts it
behind httpx's transport interface.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpcore

from ors_gym._compat.httpcore import lean_state_lock
from ors_gym.backends.http._aio import AsyncioBackend, AsyncioStream

__all__ = ["Http11Pool"]

_Key = tuple[bytes, bytes, int | None]
_DEFAULT_PORTS = {b"http": 80, b"https": 443}


class Http11Pool:
    """HTTP/1.1 connections to any origin, reused while idle.

    ``max_connections`` bounds the open connections (None: no bound; a request
    over it waits up to its ``pool`` timeout, then raises ``httpcore.PoolTimeout``);
    at most ``max_keepalive_connections`` idle ones are kept, each for
    ``keepalive_expiry`` seconds.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        max_connections: int | None = None,
        max_keepalive_connections: int | None = None,
        keepalive_expiry: float | None = 5.0,
        network: AsyncioBackend | None = None,
    ) -> None:
        ssl_context.set_alpn_protocols(["http/1.1"])
        self._ssl_context = ssl_context
        self._max = max_connections
        self._max_idle = max_keepalive_connections
        self._expiry = keepalive_expiry
        self._network = network or AsyncioBackend()
        self._idle: dict[_Key, list[_Conn]] = {}
        self._idle_count = 0
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._epoch = 0  # aclose() starts a new one: older connections are not kept

    @property
    def open_connections(self) -> int:
        """Connections open now, busy or idle."""
        return self._open

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` on an idle connection to its origin, or a new one; the
        response's body is read from ``response.stream``, whose ``aclose`` gives
        the connection back (or closes it, if the body was not read to its end)."""
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            raise httpcore.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{url.scheme.decode()}://'."
            )
        key = (url.scheme, url.host, url.port)
        conn = self._take_idle(key) or await self._acquire(request, key)
        try:
            response = await conn.http.handle_async_request(request)
        except BaseException:
            self._drop(conn)
            raise
        return httpcore.Response(
            status=response.status,
            headers=response.headers,
            content=_Body(self, conn, response.stream),
            extensions=response.extensions,
        )

    def _take_idle(self, key: _Key) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            self._idle_count -= 1
            if conn.http.is_available() and not conn.http.has_expired():
                return conn
            self._drop(conn)
        return None

    async def _acquire(self, request: httpcore.Request, key: _Key) -> _Conn:
        """A connection for ``request``: an idle one to its origin, else a new one once
        fewer than ``max_connections`` are open (closing an idle one to another origin,
        or waiting up to the ``pool`` timeout for a connection to come back)."""
        timeout = request.extensions.get("timeout", {}).get("pool")
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while True:
            conn = self._take_idle(key)
            if conn is not None:
                return conn
            if self._max is None or self._open < self._max:
                return await self._connect(request, key)
            if self._idle_count and self._close_any_idle():
                continue
            await self._wait(deadline, timeout)

    async def _connect(self, request: httpcore.Request, key: _Key) -> _Conn:
        """A new connection to ``key``'s origin, counted open from the start."""
        timeouts = request.extensions.get("timeout", {})
        self._open += 1
        try:
            url = request.url
            scheme, host, port = key
            stream: Any = await self._network.connect_tcp(
                host.decode("ascii"), port or _DEFAULT_PORTS[scheme],
                timeout=timeouts.get("connect"),
            )
            if scheme == b"https":
                sni = request.extensions.get("sni_hostname") or host.decode("ascii")
                stream = await stream.start_tls(self._ssl_context, server_hostname=sni,
                                                timeout=timeouts.get("connect"))
        except BaseException:
            self._open -= 1
            self._wake()
            raise
        origin = httpcore.Origin(url.scheme, url.host, port or _DEFAULT_PORTS[scheme])
        http = httpcore.AsyncHTTP11Connection(origin, stream, keepalive_expiry=self._expiry)
        lean_state_lock(http)
        return _Conn(key, self._epoch, stream, http)

    async def _wait(self, deadline: float | None, timeout: float | None) -> None:
        """Wait until a connection comes back or closes (``_wake``), or raise
        ``httpcore.PoolTimeout`` at ``deadline``."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except BaseException as exc:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            else:  # woken as it gave up: the free connection goes to the next in line
                self._wake()
            if isinstance(exc, TimeoutError):
                raise httpcore.PoolTimeout(
                    f"no connection became free within {timeout} s "
                    f"(max_connections={self._max})"
                ) from None
            raise

    def _close_any_idle(self) -> bool:
        for idle in self._idle.values():
            if idle:
                self._idle_count -= 1
                self._drop(idle.pop(0))
                return True
        return False

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, conn: _Conn) -> None:
        """A response is closed: keep its connection if it can serve another request."""
        if (
            conn.epoch != self._epoch
            or not conn.http.is_available()
            or (self._max_idle is not None and self._idle_count >= self._max_idle)
        ):
            self._drop(conn)
            return
        self._idle.setdefault(conn.key, []).append(conn)
        self._idle_count += 1
        self._wake()

    def _drop(self, conn: _Conn) -> None:
        """Close a connection (at once: the socket is closed by the loop) and free its slot."""
        if conn.dropped:
            return
        conn.dropped = True
        conn.stream.close()
        self._open -= 1
        self._wake()

    async def aclose(self) -> None:
        """Close every idle connection; busy ones close when their responses are closed.

        The pool stays usable (as httpcore's does): later requests open new connections.
        """
        self._epoch += 1
        idle, self._idle, self._idle_count = self._idle, {}, 0
        for conns in idle.values():
            for conn in conns:
                self._drop(conn)


class _Conn:
    __slots__ = ("dropped", "epoch", "http", "key", "stream")

    def __init__(self, key: _Key, epoch: int, stream: AsyncioStream,
                 http: httpcore.AsyncHTTP11Connection) -> None:
        self.key = key
        self.epoch = epoch
        self.stream = stream
        self.http = http
        self.dropped = False


class _Body:
    """A response body; closing it hands its connection back to the pool."""

    __slots__ = ("_closed", "_conn", "_pool", "_stream")

    def __init__(self, pool: Http11Pool, conn: _Conn, stream: Any) -> None:
        self._pool = pool
        self._conn = conn
        self._stream = stream
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._stream.aclose()
        finally:
            self._pool._release(self._conn)
