"""The transport under the HTTP backends: how a request's bytes reach the server.

``_pool.PooledTransport`` is an httpx transport over ``_http11.Http11Pool``
(httpcore's HTTP/1.1 connections, at most ``max_connections_per_host`` to one
server, queued requests served first come first served) over ``_aio``'s
network backend on asyncio streams. The operations above know none of it: the
driver hands each request to a transport's ``handle_async_request``, and any
``httpx.AsyncBaseTransport`` does; a reader of the protocol can skip this folder.
"""
