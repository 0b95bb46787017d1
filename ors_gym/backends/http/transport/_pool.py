"""The connection pool under ``AsyncHttpBackend``, as an httpx transport.

``PooledTransport`` is an ``httpx.AsyncBaseTransport`` over one
``_http11.Http11Pool`` (httpcore's HTTP/1.1 connections over an asyncio-native
network backend, ``_aio``): any ``httpx.AsyncClient(transport=...)`` can mount
it, and ``AsyncHttpBackend`` calls its ``handle_async_request`` directly.
``pooled_transport`` makes one to share between backends; when a proxy variable
is set it makes an ``EnvProxyTransport`` instead, which sends through an
``httpx.AsyncClient(trust_env=True)``, so the variables mean what they mean
to httpx (``NO_PROXY`` included). ``failure_of`` tells the operations what an
httpx exception from any transport means (a ``Failure``).
"""

from __future__ import annotations

import errno
import urllib.request
from collections.abc import AsyncIterable, AsyncIterator
from typing import NoReturn, cast

import httpcore
import httpx

from ors_gym.backends.http._steps import Failure, FailureKind
from ors_gym.backends.http.options import MAX_CONNECTIONS_PER_HOST
from ors_gym.backends.http.transport._aio import AsyncioBackend
from ors_gym.backends.http.transport._http11 import Http11Pool, IdleConnectionClosed

__all__ = [
    "MAX_CONNECTIONS_PER_HOST",
    "EnvProxyTransport",
    "IdleConnectionClosedError",
    "PooledTransport",
    "failure_of",
    "httpx_error",
    "pooled_transport",
    "proxy_variables_set",
]


class IdleConnectionClosedError(httpx.RemoteProtocolError):
    """The server had closed the kept-alive connection a request was written on while it
    sat idle; it never read the request (see ``_http11.IdleConnectionClosed``)."""


#: httpcore's exceptions and the httpx ones ``httpx.AsyncHTTPTransport`` raises for them,
#: most specific first.
_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (IdleConnectionClosed, IdleConnectionClosedError),
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def httpx_error(exc: Exception) -> Exception:
    """The httpx exception for an httpcore one (as httpx's transport maps it), else ``exc``."""
    for source, target in _ERRORS:
        if isinstance(exc, source):
            return target(str(exc))
    return exc


def _reraise(exc: Exception) -> NoReturn:
    mapped = httpx_error(exc)
    if mapped is exc:
        raise exc
    raise mapped from exc


def failure_of(exc: httpx.TransportError) -> Failure:
    """What the operations need to know about an httpx exception."""
    kind: FailureKind
    if _out_of_descriptors(exc):
        kind = "no_descriptors"
    elif isinstance(exc, httpx.ConnectTimeout):
        kind = "connect_timeout"
    elif isinstance(exc, httpx.ReadTimeout):
        kind = "read_timeout"
    elif isinstance(exc, httpx.TimeoutException):
        kind = "timeout"
    elif isinstance(exc, httpx.ConnectError):
        kind = "refused"
    elif isinstance(exc, IdleConnectionClosedError):
        kind = "stale"
    else:
        kind = "broken"
    return Failure(kind, type(exc).__name__, str(exc))


def _out_of_descriptors(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is this process, or the system,
    out of file descriptors (``EMFILE``, ``ENFILE``)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _ResponseStream(httpx.AsyncByteStream):
    """httpcore's body stream, its failures raised as httpx's exceptions; closing it
    hands the connection back to the pool (or closes it, if the body was not read)."""

    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except Exception as exc:
            _reraise(exc)

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class PooledTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 connections to any origin, reused while idle, as an httpx transport.

    ``max_connections`` bounds the open connections and ``max_connections_per_host``
    those to one origin (None: no bound; a request over either queues for a
    connection up to its ``pool`` timeout, then raises ``httpx.PoolTimeout``);
    at most ``max_keepalive_connections`` idle ones are kept (None: every one),
    each for httpx's default keep-alive expiry. HTTP/1.1 only, no proxy,
    certificates verified as httpx verifies them. Failures raise the httpx
    exceptions ``httpx.AsyncHTTPTransport`` raises; the response's body streams
    as it arrives, and closing the response gives its connection back.
    """

    def __init__(
        self,
        max_connections: int | None = None,
        max_keepalive_connections: int | None = None,
        *,
        max_connections_per_host: int | None = MAX_CONNECTIONS_PER_HOST,
    ) -> None:
        for name, value in (("max_connections", max_connections),
                            ("max_connections_per_host", max_connections_per_host)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be None (no bound) or >= 1, got {value}")
        if max_keepalive_connections is not None and max_keepalive_connections < 0:
            raise ValueError(f"max_keepalive_connections must be None (keep every idle "
                             f"connection) or >= 0, got {max_keepalive_connections}")
        self._pool = Http11Pool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            max_connections_per_host=max_connections_per_host,
            keepalive_expiry=httpx.Limits().keepalive_expiry,
            network=AsyncioBackend(),
        )

    @property
    def open_connections(self) -> int:
        """Connections open now, busy or idle."""
        return self._pool.open_connections

    def open_to(self, url: str) -> int:
        """Connections open now (busy, idle or being opened) to ``url``'s origin."""
        parsed = httpx.URL(url)
        return self._pool.open_to(parsed.raw_scheme, parsed.raw_host, parsed.port)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on an idle connection to its origin, or a new one; the
        response's body is unread (``aiter_raw``/``aread``), ``aclose`` frees the connection."""
        core = httpcore.Request(
            method=request.method,
            url=_core_url(request.url),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core)
        except Exception as exc:
            _reraise(exc)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(cast(AsyncIterable[bytes], response.stream)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close every idle connection; busy ones close when their responses are closed.
        The transport stays usable: later requests open new connections."""
        await self._pool.aclose()


def _core_url(url: httpx.URL) -> httpcore.URL:
    """``url`` as httpcore's (the backend keeps its parsed URLs; this is a cheap copy)."""
    if url.raw_scheme not in (b"http", b"https") or not url.raw_host:
        raise httpx.UnsupportedProtocol(
            f"Request URL {str(url)!r} is not an absolute http:// or https:// URL; "
            "give the server's address with its scheme, e.g. http://127.0.0.1:8000"
        )
    return httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                        target=url.raw_path)


class EnvProxyTransport(httpx.AsyncBaseTransport):
    """Requests sent through an ``httpx.AsyncClient(trust_env=True)``: the proxy variables
    (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) applied as httpx
    applies them, on httpx's own pool. The client is made on first use, and again after
    ``aclose`` (the transport stays usable, as ``PooledTransport`` does).

    Every connection goes to one host, the proxy (or, for ``NO_PROXY`` hosts, a
    server): httpx's pool, which has no bound per host, is bounded by the smaller
    of ``max_connections`` and ``max_connections_per_host``.
    """

    def __init__(
        self, max_connections: int | None = None, max_keepalive_connections: int | None = None,
        *, max_connections_per_host: int | None = MAX_CONNECTIONS_PER_HOST,
    ) -> None:
        bounds = [b for b in (max_connections, max_connections_per_host) if b is not None]
        self._limits = httpx.Limits(max_connections=min(bounds) if bounds else None,
                                    max_keepalive_connections=max_keepalive_connections)
        self._client: httpx.AsyncClient | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` (its timeouts in its extensions); the body is unread."""
        if self._client is None:
            self._client = httpx.AsyncClient(trust_env=True, limits=self._limits, timeout=None)
        return await self._client.send(request, stream=True)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def proxy_variables_set() -> bool:
    """Whether a proxy variable httpx honours is set (as ``urllib.request.getproxies``
    reads them: ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, either case)."""
    found = urllib.request.getproxies()
    return any(found.get(scheme) for scheme in ("http", "https", "all"))


def pooled_transport(
    max_connections: int | None = None,
    max_keepalive_connections: int | None = None,
    *,
    max_connections_per_host: int | None = MAX_CONNECTIONS_PER_HOST,
    trust_env: bool = True,
) -> httpx.AsyncBaseTransport:
    """A connection pool to share between backends (``AsyncHttpBackend(transport=...)``).

    ``max_connections`` bounds its open connections and ``max_connections_per_host``
    those to one server (None: no bound; requests over them queue for a
    connection); it keeps at most ``max_keepalive_connections`` idle ones (None:
    all). A
    ``PooledTransport``; with ``trust_env`` and a proxy variable set, an
    ``EnvProxyTransport`` (httpx's client, which applies them). Whoever made it
    closes it (``await pool.aclose()``); the backends sending through it do not.
    """
    if trust_env and proxy_variables_set():
        return EnvProxyTransport(max_connections, max_keepalive_connections,
                                 max_connections_per_host=max_connections_per_host)
    return PooledTransport(max_connections, max_keepalive_connections,
                           max_connections_per_host=max_connections_per_host)
