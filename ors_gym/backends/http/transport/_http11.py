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
import itertools
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpcore

from ors_gym._compat.httpcore import lean_state_lock
from ors_gym.backends.http.transport._aio import AsyncioBackend, AsyncioStream

__all__ = ["Http11Pool", "IdleConnectionClosed"]

_Key = tuple[bytes, bytes, int | None]
_DEFAULT_PORTS = {b"http": 80, b"https": 443}
#: Connections being opened to one origin at once; more wait their turn (each attempt's
#: ``connect`` timeout starts with it). Thousands of connects at once overflow a server's
#: accept queue, and each refused handshake then waits out its timeout.
MAX_CONNECTING = 64


class IdleConnectionClosed(httpcore.RemoteProtocolError):
    """A request written on a kept-alive connection that the server had closed while it
    sat idle: the connection had served earlier requests and ended before a single byte
    of this answer, so the server never read the request (it is safe to send again)."""


class Http11Pool:
    """HTTP/1.1 connections to any origin, reused while idle.

    ``max_connections`` bounds the open connections, ``max_connections_per_host``
    those to one origin (None: no bound); a request over either waits up to its
    ``pool`` timeout for a connection, then raises ``httpcore.PoolTimeout``. At
    most ``max_keepalive_connections`` idle ones are kept, each for
    ``keepalive_expiry`` seconds. Requests to one origin are served first come,
    first served: a connection given back, or a free slot, goes to the oldest
    waiter before any newcomer.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        max_connections: int | None = None,
        max_keepalive_connections: int | None = None,
        max_connections_per_host: int | None = None,
        keepalive_expiry: float | None = 5.0,
        network: AsyncioBackend | None = None,
    ) -> None:
        ssl_context.set_alpn_protocols(["http/1.1"])
        self._ssl_context = ssl_context
        self._max = max_connections
        self._max_idle = max_keepalive_connections
        self._per_host = max_connections_per_host
        self._expiry = keepalive_expiry
        self._network = network or AsyncioBackend()
        self._idle: dict[_Key, list[_Conn]] = {}
        self._idle_count = 0
        self._open = 0
        self._open_by: dict[_Key, int] = {}
        self._waiters: dict[_Key, deque[_Waiter]] = {}  # per origin, oldest first
        self._order = itertools.count()  # waiters' arrival order, across origins
        self._epoch = 0  # aclose() starts a new one: older connections are not kept
        self._connecting: dict[_Key, asyncio.Semaphore] = {}

    @property
    def open_connections(self) -> int:
        """Connections open now, busy or idle."""
        return self._open

    def open_to(self, scheme: bytes, host: bytes, port: int | None) -> int:
        """Connections open now (busy or idle, or being opened) to one origin."""
        return self._open_by.get((scheme, host, port), 0)

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
        conn = (None if key in self._waiters else self._take_idle(key)) or await self._acquire(
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

    def _host_has_room(self, key: _Key) -> bool:
        return self._per_host is None or self._open_by.get(key, 0) < self._per_host

    def _count_open(self, key: _Key) -> None:
        self._open += 1
        self._open_by[key] = self._open_by.get(key, 0) + 1

    async def _acquire(self, request: httpcore.Request, key: _Key) -> _Conn:
        """A connection for ``request``: an idle one to its origin, else a new one while
        fewer than ``max_connections`` are open (closing an idle one to another origin)
        and fewer than ``max_connections_per_host`` to its origin, else the first to
        come back or free a slot after every earlier waiter for that origin was served
        (up to the ``pool`` timeout)."""
        if key not in self._waiters:
            conn = self._take_idle(key)
            if conn is not None:
                return conn
            if self._host_has_room(key) and (
                    self._max is None or self._open < self._max or self._close_any_idle()):
                self._count_open(key)
                return await self._connect(request, key)
        timeout = request.extensions.get("timeout", {}).get("pool")
        granted = await self._wait(key, timeout)
        if granted is not None:
            return granted
        return await self._connect(request, key)  # a slot was counted open for it

    async def _connect(self, request: httpcore.Request, key: _Key) -> _Conn:
        """A new connection to ``key``'s origin, in a slot already counted open, once
        fewer than ``MAX_CONNECTING`` are being opened to it."""
        timeouts = request.extensions.get("timeout", {})
        gate = self._connecting.get(key)
        if gate is None:
            gate = self._connecting[key] = asyncio.Semaphore(MAX_CONNECTING)
        try:
            url = request.url
            scheme, host, port = key
            async with gate:
                stream: Any = await self._network.connect_tcp(
                    host.decode("ascii"), port or _DEFAULT_PORTS[scheme],
                    timeout=timeouts.get("connect"),
                )
                if scheme == b"https":
                    sni = request.extensions.get("sni_hostname") or host.decode("ascii")
                    stream = await stream.start_tls(self._ssl_context, server_hostname=sni,
                                                    timeout=timeouts.get("connect"))
        except BaseException:
            self._free_slot(key)
            raise
        origin = httpcore.Origin(url.scheme, url.host, port or _DEFAULT_PORTS[scheme])
        http = httpcore.AsyncHTTP11Connection(origin, stream, keepalive_expiry=self._expiry)
        lean_state_lock(http)
        return _Conn(key, self._epoch, stream, http)

    async def _wait(self, key: _Key, timeout: float | None) -> _Conn | None:
        """Queue behind earlier waiters until given a connection to ``key``'s origin, or
        a slot counted open (None); ``httpcore.PoolTimeout`` after ``timeout``."""
        waiter = _Waiter(key, next(self._order), asyncio.get_running_loop().create_future())
        self._waiters.setdefault(key, deque()).append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter.future
        except BaseException as exc:
            future = waiter.future
            if future.done() and not future.cancelled():  # served as it gave up: pass it on
                granted = future.result()
                if granted is None:
                    self._free_slot(key)
                else:
                    self._release(granted)
            else:
                queue = self._waiters.get(key)
                if queue is not None and waiter in queue:
                    queue.remove(waiter)
                    if not queue:
                        del self._waiters[key]
            if isinstance(exc, TimeoutError):
                raise httpcore.PoolTimeout(
                    f"no connection became free within {timeout} s "
                    f"(max_connections={self._max}, "
                    f"max_connections_per_host={self._per_host})"
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
                self._uncount(conn.key)
                return True
        return False

    def _uncount(self, key: _Key) -> None:
        self._open -= 1
        left = self._open_by[key] - 1
        if left:
            self._open_by[key] = left
        else:
            del self._open_by[key]

    def _next_waiter(self, key: _Key) -> _Waiter | None:
        """The oldest live waiter for ``key``'s origin, taken off its queue."""
        queue = self._waiters.get(key)
        while queue:
            waiter = queue.popleft()
            if not waiter.future.done():
                if not queue:
                    del self._waiters[key]
                return waiter
        self._waiters.pop(key, None)
        return None

    def _slot_taker(self) -> _Waiter | None:
        """The oldest live waiter whose origin has room for one more connection (None
        if the pool is full or no waiter fits), taken off its queue."""
        if self._max is not None and self._open >= self._max:
            return None
        best: _Waiter | None = None
        for key, queue in list(self._waiters.items()):
            while queue and queue[0].future.done():
                queue.popleft()
            if not queue:
                del self._waiters[key]
            elif self._host_has_room(key) and (best is None or queue[0].order < best.order):
                best = queue[0]
        if best is not None:
            self._next_waiter(best.key)
        return best

    def _others_need_slot(self, key: _Key) -> bool:
        """A waiter for another origin could open a connection if one more slot were free."""
        return any(k != key and self._host_has_room(k) for k in self._waiters)

    def _free_slot(self, key: _Key) -> None:
        """A connection to ``key``'s origin closed: its slot goes to the oldest waiter
        that may take it, if any."""
        self._uncount(key)
        waiter = self._slot_taker()
        if waiter is not None:
            self._count_open(waiter.key)
            waiter.future.set_result(None)  # a slot counted open, now the waiter's

    def _release(self, conn: _Conn) -> None:
        """A response is closed: its connection goes to the oldest waiter for its origin,
        else is kept idle if it can serve again (closed instead, if a waiter for another
        origin needs its slot)."""
        reusable = conn.epoch == self._epoch and conn.http.is_available()
        if reusable and conn.key in self._waiters:
            waiter = self._next_waiter(conn.key)
            if waiter is not None:
                waiter.future.set_result(conn)
                return
        if (not reusable or (self._waiters and self._others_need_slot(conn.key))
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
        self._free_slot(conn.key)

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
    __slots__ = ("future", "key", "order")

    def __init__(self, key: _Key, order: int, future: asyncio.Future[_Conn | None]) -> None:
        self.key = key
        self.order = order
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
