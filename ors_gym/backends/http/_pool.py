"""Connection pools for many concurrent sessions on one event loop.

httpcore's pool re-examines every connection it holds whenever a request
starts or ends, so one pool serving hundreds of sessions costs O(N^2) per
batch of calls. ``ShardedTransport`` splits it, keeping each session on one
shard; ``PooledClient`` is an ``AsyncClient`` over it, whose pool
``AsyncHttpBackend`` sends requests to directly.
"""

from __future__ import annotations

import httpx

__all__ = ["PooledClient", "ShardedTransport", "pooled_client"]


class ShardedTransport(httpx.AsyncBaseTransport):
    """Several connection pools behind one client; a session's requests always use the same one.

    httpcore's pool re-examines every connection it holds (a ``poll()`` on each
    idle one) whenever a request starts or ends, so one pool serving N sessions
    at once costs O(N^2) per batch of calls. Here each new session (by its
    ``X-Session-ID``) joins the pool with the fewest sessions and stays there
    until its ``/delete``; requests without a session use the first pool.
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
        per_shard = None if max_connections is None else max(1, -(-max_connections // shards))
        # Each pool may keep all its connections: httpcore closes idle connections once
        # the pool holds more than max_keepalive_connections in total, idle or not.
        limits = httpx.Limits(
            max_connections=per_shard, max_keepalive_connections=max_keepalive_connections
        )
        ssl_context = httpx.create_ssl_context()  # ~40 ms to make: one for all pools
        self._pools = [
            httpx.AsyncHTTPTransport(limits=limits, verify=ssl_context) for _ in range(shards)
        ]
        self._load = [0] * shards
        self._shard_of: dict[str, int] = {}

    @property
    def shards(self) -> int:
        return len(self._pools)

    def _shard(self, request: httpx.Request) -> int:
        sid = request.headers.get("x-session-id")
        if sid is None:
            return 0
        shard = self._shard_of.get(sid)
        if shard is None:
            load = self._load
            shard = self._shard_of[sid] = load.index(min(load))
            load[shard] += 1
        if request.url.path.endswith("/delete") and request.method == "POST":
            del self._shard_of[sid]
            self._load[shard] -= 1
        return shard

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pools = self._pools
        pool = pools[self._shard(request)] if len(pools) > 1 else pools[0]
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class PooledClient(httpx.AsyncClient):
    """An ``AsyncClient`` over a ``ShardedTransport`` (``pool``), for many concurrent sessions.

    ``AsyncHttpBackend`` hands its requests straight to ``pool``: the client's
    per-request layers (auth flow, redirects, cookies, event hooks) cost more
    CPU than the connection pool itself, and the backend's operations do what of them an
    ORS request needs (headers, auth, redirects, decoding) itself.
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

    httpx keeps at most 20 idle connections by default and closes the rest:
    with more sessions in flight every batch would reopen connections, so pass
    at least the number of concurrent requests as ``max_keepalive_connections``.
    ``shards`` splits the pool (see ``ShardedTransport``); one shard per one or
    two concurrent sessions keeps the pool's bookkeeping small.
    """
    return PooledClient(max_connections, max_keepalive_connections, shards=shards)
