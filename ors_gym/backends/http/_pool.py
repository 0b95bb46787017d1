"""Connection pools for many concurrent sessions on one event loop.

``ShardedTransport`` is an httpx transport over several ``_http11.Http11Pool``
(httpcore's HTTP/1.1 connections over an asyncio-native network backend,
``_aio``), each session kept on one shard; ``PooledClient`` is an
``AsyncClient`` over it. Besides the httpx transport API it takes requests
from ``AsyncHttpBackend`` directly (``ShardedTransport.send``): building an
``httpx.Request`` (its URL parsed again each time) and an ``httpx.Response``
for every call cost about a tenth of the client's CPU per step, for what an
ORS request does not use.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, NoReturn

import httpcore
import httpx

from ors_gym.backends.http._aio import AsyncioBackend
from ors_gym.backends.http._http11 import Http11Pool

__all__ = ["CoreResponse", "PooledClient", "ShardedTransport", "httpx_error", "pooled_client"]

#: httpcore's exceptions and the httpx ones ``httpx.AsyncHTTPTransport`` raises for them,
#: most specific first.
_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
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
#: Distinct URLs whose parsed form is kept (paths of a few servers' endpoints).
_URL_CACHE = 512
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


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


class CoreResponse:
    """An answer from ``ShardedTransport.send``: what the backend reads of an
    ``httpx.Response`` (``status_code``, lower-cased ``headers``, ``aiter_raw``,
    ``aclose``), raising httpx's exceptions."""

    __slots__ = ("_stream", "headers", "status_code")

    def __init__(self, response: httpcore.Response) -> None:
        self.status_code = response.status
        self.headers = _header_map(response.headers)
        self._stream: Any = response.stream

    def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, content encoding not undone."""
        return _body(self._stream)

    async def aclose(self) -> None:
        """Give the connection back (or close it, if the body was not read to its end)."""
        await self._stream.aclose()


async def _body(stream: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """httpcore's body stream, its failures raised as httpx's exceptions."""
    try:
        async for part in stream:
            yield part
    except Exception as exc:
        _reraise(exc)


def _header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Headers by lower-cased name; repeated ones joined with ", " (as ``httpx.Headers.get``)."""
    out: dict[str, str] = {}
    for key, value in raw:
        name = key.decode("latin-1").lower()
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            text = value.decode("latin-1")
        out[name] = f"{out[name]}, {text}" if name in out else text
    return out


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes]) -> None:
        self._stream = stream

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _body(self._stream)

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class ShardedTransport(httpx.AsyncBaseTransport):
    """Several connection pools behind one client; a session's requests always use the same one.

    Each new session (by its ``X-Session-ID``) joins the pool with the fewest
    sessions and stays there until its ``/delete``; requests without a session
    use the first pool. (Sharding began against httpcore's own pool, which
    re-examined every connection it held on every request; ``Http11Pool``
    does not, and shards now only split ``max_connections``.) HTTP/1.1, no
    proxy, certificates verified as httpx verifies them.
    """

    def __init__(
        self,
        shards: int = 1,
        *,
        max_connections: int | None = None,
        max_keepalive_connections: int | None = None,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        if max_connections is not None:
            # max_connections bounds all shards together: split it, no shard without one.
            shards = max(1, min(shards, max_connections))
        expiry = httpx.Limits().keepalive_expiry  # httpx's default, 5 s
        ssl_context = httpx.create_ssl_context()  # ~40 ms to make: one for all pools
        network = AsyncioBackend()
        self._pools = [
            Http11Pool(
                ssl_context=ssl_context,
                max_connections=None if max_connections is None else (
                    max_connections // shards + (i < max_connections % shards)
                ),
                # Each pool keeps up to this many idle connections (None: every one).
                max_keepalive_connections=max_keepalive_connections,
                keepalive_expiry=expiry,
                network=network,
            )
            for i in range(shards)
        ]
        self._load = [0] * shards
        self._shard_of: dict[str, int] = {}
        self._urls: dict[str, tuple[httpcore.URL, bytes]] = {}

    @property
    def shards(self) -> int:
        return len(self._pools)

    def _pool(self, sid: str | None, method: str, path: bytes) -> Http11Pool:
        pools = self._pools
        if len(pools) == 1 or sid is None:
            return pools[0]
        shard = self._shard_of.get(sid)
        if shard is None:
            load = self._load
            shard = self._shard_of[sid] = load.index(min(load))
            load[shard] += 1
        if method == "POST" and path.split(b"?", 1)[0].endswith(b"/delete"):
            del self._shard_of[sid]
            self._load[shard] -= 1
        return pools[shard]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """httpx's transport API (``PooledClient``'s own requests)."""
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = request.url
        pool = self._pool(request.headers.get("x-session-id"), request.method, url.raw_path)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                             target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await pool.handle_async_request(core)
        except Exception as exc:
            _reraise(exc)
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None,
        timeout: Mapping[str, float | None],
    ) -> CoreResponse:
        """Send one request straight to its session's pool; the answer's body unread.

        The request is the one ``httpx.Request(method, url, headers=headers,
        content=content)`` would send (``Host`` and ``Content-Length`` added), and
        failures raise the same httpx exceptions.
        """
        target = self._urls.get(url)
        if target is None:
            target = self._parse(url)
        core_url, host = target
        raw = [(b"Host", host)]
        raw += [(k.encode("ascii"), v.encode("ascii")) for k, v in headers.items()]
        if content:
            raw.append((b"Content-Length", b"%d" % len(content)))
        elif method in _BODY_METHODS:
            raw.append((b"Content-Length", b"0"))
        request = httpcore.Request(method, core_url, headers=raw, content=content,
                                   extensions={"timeout": timeout})
        pool = self._pool(headers.get("X-Session-ID"), method, core_url.target)
        try:
            response = await pool.handle_async_request(request)
        except Exception as exc:
            _reraise(exc)
        return CoreResponse(response)

    def _parse(self, url: str) -> tuple[httpcore.URL, bytes]:
        """``url`` parsed as httpx parses it (kept: a backend sends to a few URLs)."""
        parsed = httpx.URL(url)
        if parsed.raw_scheme not in (b"http", b"https") or not parsed.raw_host:
            raise httpx.UnsupportedProtocol(
                f"Request URL {url!r} is not an absolute http:// or https:// URL."
            )
        target = (
            httpcore.URL(scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port,
                         target=parsed.raw_path),
            parsed.netloc,
        )
        if len(self._urls) >= _URL_CACHE:
            self._urls.clear()
        self._urls[url] = target
        return target

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class PooledClient(httpx.AsyncClient):
    """An ``AsyncClient`` over a ``ShardedTransport`` (``pool``), for many concurrent sessions.

    ``AsyncHttpBackend`` hands its requests straight to ``pool.send``: the
    client's per-request layers (auth flow, redirects, cookies, event hooks)
    cost more CPU than the connection pool itself, and the backend's operations
    do what of them an ORS request needs (headers, auth, redirects, decoding)
    itself.
    """

    def __init__(
        self,
        max_connections: int | None = None,
        max_keepalive_connections: int | None = None,
        *,
        shards: int = 1,
    ) -> None:
        self.pool = ShardedTransport(
            shards,
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
        )
        super().__init__(transport=self.pool, follow_redirects=False)


def pooled_client(
    max_connections: int | None = None,
    max_keepalive_connections: int | None = None,
    *,
    shards: int = 1,
) -> PooledClient:
    """An ``AsyncClient`` for many concurrent sessions.

    ``max_connections`` bounds the open connections of all shards together
    (None: no bound); each shard keeps at most ``max_keepalive_connections``
    idle ones (None: all). ``shards`` splits the pool (see ``ShardedTransport``).
    """
    return PooledClient(max_connections, max_keepalive_connections, shards=shards)
