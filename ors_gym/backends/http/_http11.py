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

__all__ = ["Http11Pool", "IdleConnectionClosed"]

_Key = tuple[bytes, bytes, int | None]
_DEFAULT_PORTS = {b"http": 80, b"https": 443}


class IdleConnectionClosed(httpcore.RemoteProtocolError):
    """A request written on a kept-alive connection that the server had closed while it
    sat idle: the connection had served earlier requests and ended before a single byte
    of this answer, so the server never read the request (it is safe to send again)."""


class Http11Pool:
    """HTTP/1.1 connections to any origin, reused while idle.

    ``max_connections`` bounds the open connections (None: no bound; a request
    over it waits up to its ``pool`` timeout, then raises ``httpcore.PoolTimeout``);
    at most ``max_keepalive_connections`` idle ones are kept, each for
    ``keepalive_expiry`` seconds. Waiting requests are served first come, first
    served: a connection given back, or a free slot, goes to the oldest waiter
    before any newcomer.
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
        self._waiters: deque[_Waiter] = deque()
        self._epoch = 0  # aclose() starts a new one: older connections are not kept

    @property
    def open_connections(self) -> int:
        """Connections open now, busy or idle."""
        return self._open

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` on an idle connection to its origin, or a new one; the
        response's body is read from ``response.stream``, whose ``aclose`` gives
        the connection back (or closes it, if the body was not read to its end).

        A kept-alive connection the server closed while idle, found only as the
        request was written, raises ``IdleConnectionClosed``."""
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            raise httpcore.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{url.scheme.decode()}://'."
            )
        key = (url.scheme, url.host, url.port)
        conn = (None if self._waiters else self._take_idle(key)) or await self._acquire(
            request, key)
        received = conn.stream.received
        try:
            response = await conn.http.handle_async_request(request)
        except BaseException as exc:
            self._drop(conn)
            if (conn.served and conn.stream.received == received
                    and isinstance(exc, _CLOSED_ERRORS)):
                raise IdleConnectionClosed(
                    f"the server closed this kept-alive connection while it was idle, "
                    f"before reading the request ({type(exc).__name__}: {exc})"
                ) from exc
            raise
        conn.served += 1
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
        fewer than ``max_connections`` are open (closing an idle one to another origin),
        else the first to come back or free a slot after every earlier waiter was served
        (up to the ``pool`` timeout)."""
        if not self._waiters:
            conn = self._take_idle(key)
            if conn is not None:
                return conn
            if self._max is None or self._open < self._max or self._close_any_idle():
                self._open += 1
                return await self._connect(request, key)
        timeout = request.extensions.get("timeout", {}).get("pool")
        granted = await self._wait(key, timeout)
        if granted is not None:
            return granted
        return await self._connect(request, key)  # a slot was counted open for it

    async def _connect(self, request: httpcore.Request, key: _Key) -> _Conn:
        """A new connection to ``key``'s origin, in a slot already counted open."""
        timeouts = request.extensions.get("timeout", {})
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
            self._free_slot()
            raise
        origin = httpcore.Origin(url.scheme, url.host, port or _DEFAULT_PORTS[scheme])
        http = httpcore.AsyncHTTP11Connection(origin, stream, keepalive_expiry=self._expiry)
        lean_state_lock(http)
        return _Conn(key, self._epoch, stream, http)

    async def _wait(self, key: _Key, timeout: float | None) -> _Conn | None:
        """Queue behind earlier waiters until given a connection to ``key``'s origin, or
        a slot counted open (None); ``httpcore.PoolTimeout`` after ``timeout``."""
        waiter = _Waiter(key, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter.future
        except BaseException as exc:
            future = waiter.future
            if future.done() and not future.cancelled():  # served as it gave up: pass it on
                granted = future.result()
                if granted is None:
                    self._free_slot()
                else:
                    self._release(granted)
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise httpcore.PoolTimeout(
                    f"no connection became free within {timeout} s "
                    f"(max_connections={self._max})"
                ) from None
            raise

    def _close_any_idle(self) -> bool:
        """Close an idle connection (to any origin) to free its slot; False if none."""
        for idle in self._idle.values():
            if idle:
                self._idle_count -= 1
                conn = idle.pop(0)
                conn.dropped = True
                conn.stream.close()
                self._open -= 1
                return True
        return False

    def _next_waiter(self) -> _Waiter | None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                return waiter
        return None

    def _free_slot(self) -> None:
        """A connection closed: its slot goes to the oldest waiter, if any."""
        waiter = self._next_waiter()
        if waiter is None:
            self._open -= 1
        else:
            waiter.future.set_result(None)  # the slot stays counted open, now the waiter's

    def _release(self, conn: _Conn) -> None:
        """A response is closed: its connection goes to the oldest waiter (or its slot,
        if the waiter wants another origin), else is kept idle if it can serve again."""
        reusable = conn.epoch == self._epoch and conn.http.is_available()
        if reusable and self._waiters:
            waiter = self._next_waiter()
            if waiter is not None and waiter.key == conn.key:
                waiter.future.set_result(conn)
                return
            if waiter is not None:
                self._waiters.appendleft(waiter)
        if (not reusable or self._waiters
                or (self._max_idle is not None and self._idle_count >= self._max_idle)):
            self._drop(conn)
            return
        self._idle.setdefault(conn.key, []).append(conn)
        self._idle_count += 1

    def _drop(self, conn: _Conn) -> None:
        """Close a connection (at once: the socket is closed by the loop) and free its slot."""
        if conn.dropped:
            return
        conn.dropped = True
        conn.stream.close()
        self._free_slot()

    async def aclose(self) -> None:
        """Close every idle connection; busy ones close when their responses are closed.

        The pool stays usable (as httpcore's does): later requests open new connections.
        """
        self._epoch += 1
        idle, self._idle, self._idle_count = self._idle, {}, 0
        for conns in idle.values():
            for conn in conns:
                self._drop(conn)


#: What writing on, or reading from, a connection the server closed raises.
_CLOSED_ERRORS = (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError)


class _Waiter:
    __slots__ = ("future", "key")

    def __init__(self, key: _Key, future: asyncio.Future[_Conn | None]) -> None:
        self.key = key
        self.future = future


class _Conn:
    __slots__ = ("dropped", "epoch", "http", "key", "served", "stream")

    def __init__(self, key: _Key, epoch: int, stream: AsyncioStream,
                 http: httpcore.AsyncHTTP11Connection) -> None:
        self.key = key
        self.epoch = epoch
        self.stream = stream
        self.http = http
        self.dropped = False
        self.served = 0  # requests answered on it: more than 0 means kept alive


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
