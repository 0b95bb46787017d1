"""The async HTTP stack under ``AsyncHttpBackend``: the asyncio network backend, the
lean HTTP/1.1 pool and the sharded transport, against real sockets on 127.0.0.1.

A small asyncio HTTP/1.1 server (``_Server``) answers with what each test
needs (keep-alive, a server-side close, silence, a long body, TLS) and counts
the connections it accepted, so reuse and closing are observed from the
server's side.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from ors_gym.backends.http._http11 import Http11Pool
from ors_gym.backends.http._pool import CoreResponse, ShardedTransport, pooled_client

TIMEOUTS = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
_Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]


async def _ok(target: bytes, writer: asyncio.StreamWriter) -> bool:
    body = b"ok " + target
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Twice: a\r\nX-Twice: b\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return True  # keep the connection


class _Server:
    """HTTP/1.1 on 127.0.0.1; ``handler`` writes each answer and says whether to keep
    the connection. Requests carry no body here, or a Content-Length one."""

    def __init__(self, handler: _Handler = _ok, ssl_context: ssl.SSLContext | None = None
                 ) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.accepted = 0
        self.closed = asyncio.Event()  # set once the server closed a connection itself
        self.requests: list[tuple[bytes, dict[bytes, bytes], bytes]] = []
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> _Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0,
                                                  ssl=self.ssl_context)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *fields = head[:-4].split(b"\r\n")
                headers = {k.strip().lower(): v.strip()
                           for k, _, v in (f.partition(b":") for f in fields)}
                body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
                target = line.split(b" ")[1]
                self.requests.append((line, headers, body))
                keep = await self.handler(target, writer)
                await writer.drain()
                if not keep:
                    writer.close()
                    await writer.wait_closed()
                    self.closed.set()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


async def _until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition()`` holds (bounded by ``_run``'s timeout)."""
    while not condition():
        await asyncio.sleep(0)


def _run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))  # type: ignore[arg-type]


async def _get(transport: ShardedTransport, url: str, sid: str | None = None,
               timeouts: dict[str, float | None] = TIMEOUTS) -> tuple[CoreResponse, bytes]:
    headers = {"Accept": "*/*"} if sid is None else {"X-Session-ID": sid}
    response = await transport.send("GET", url, headers, None, timeouts)
    try:
        body = b"".join([part async for part in response.aiter_raw()])
    finally:
        await response.aclose()
    return response, body


def test_connections_are_reused_and_requests_are_what_httpx_sends() -> None:
    async def main() -> None:
        async with _Server() as server:
            transport = ShardedTransport(2)
            for i in range(5):
                response, body = await _get(transport, f"{server.url}/p?i={i}", sid="s1")
                assert (response.status_code, body) == (200, b"ok /p?i=%d" % i)
            # One header of each name, repeated ones joined as httpx.Headers.get joins them.
            assert response.headers["content-type"] == "text/plain"
            assert response.headers["x-twice"] == "a, b"
            post = await transport.send("POST", server.url + "/delete", {"X-Session-ID": "s1"},
                                        b'{"a":1}', TIMEOUTS)
            await post.aclose()
            await transport.aclose()
        assert server.accepted == 1  # five GETs and a POST over one connection
        line, headers, body = server.requests[-1]
        assert line == b"POST /delete HTTP/1.1" and body == b'{"a":1}'
        assert headers[b"host"] == server.url.split("//")[1].encode()
        assert headers[b"content-length"] == b"7"
        line, headers, _ = server.requests[0]
        assert b"content-length" not in headers  # a GET without a body says nothing of it

    _run(main())


def test_sessions_stay_on_their_shard_until_deleted() -> None:
    async def main() -> None:
        async with _Server() as server:
            transport = ShardedTransport(3)
            for sid in ("a", "b", "c", "a", "b", "c"):
                await _get(transport, server.url + "/x", sid=sid)
            assert transport._load == [1, 1, 1]
            response = await transport.send("POST", server.url + "/delete",
                                            {"X-Session-ID": "b"}, None, TIMEOUTS)
            await response.aclose()
            assert transport._load == [1, 0, 1] and "b" not in transport._shard_of
            await transport.aclose()
        assert server.accepted == 3  # one connection per shard

    _run(main())


def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def close_after(target: bytes, writer: asyncio.StreamWriter) -> bool:
        await _ok(target, writer)
        return target != b"/last"

    async def main() -> None:
        async with _Server(close_after) as server:
            transport = ShardedTransport()
            await _get(transport, server.url + "/last")
            await server.closed.wait()  # the server closed it; the next request must not care
            for _ in range(3):
                _, body = await _get(transport, server.url + "/again")
                assert body == b"ok /again"
            await transport.aclose()
        assert server.accepted == 2

    _run(main())


def test_an_unread_body_closes_its_connection() -> None:
    async def main() -> None:
        async with _Server() as server:
            transport = ShardedTransport()
            response = await transport.send("GET", server.url + "/a", {}, None, TIMEOUTS)
            await response.aclose()  # body never read: the connection cannot be reused
            _, body = await _get(transport, server.url + "/b")
            assert body == b"ok /b"
            await transport.aclose()
        assert server.accepted == 2

    _run(main())


def test_silence_is_a_read_timeout_and_a_refused_port_a_connect_error() -> None:
    async def silent(target: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    async def main() -> None:
        async with _Server(silent) as server:
            transport = ShardedTransport()
            with pytest.raises(httpx.ReadTimeout) as err:
                await _get(transport, server.url + "/", timeouts={**TIMEOUTS, "read": 0.2})
            assert isinstance(err.value.__cause__, httpcore.ReadTimeout)
            url = server.url
        with pytest.raises(httpx.ConnectError):
            await _get(transport, url + "/")
        assert transport._pools[0].open_connections == 0
        await transport.aclose()

    _run(main())


def test_a_long_body_arrives_whole_through_flow_control() -> None:
    big = bytes(range(256)) * 8192  # 2 MiB: the protocol pauses reading past its buffer

    async def large(target: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big))
        for i in range(0, len(big), 65536):
            writer.write(big[i:i + 65536])
            await writer.drain()
        return True

    async def main() -> None:
        async with _Server(large) as server:
            transport = ShardedTransport()
            response = await transport.send("GET", server.url + "/", {}, None, TIMEOUTS)
            stream = response._stream._conn.stream
            await _until(lambda: stream._paused_reading)  # the buffer filled: reading paused
            try:
                body = b"".join([part async for part in response.aiter_raw()])
            finally:
                await response.aclose()
            assert body == big
            _, again = await _get(transport, server.url + "/")
            assert again == big
            await transport.aclose()
        assert server.accepted == 1

    _run(main())


def test_max_connections_waits_then_times_out_and_cancelling_frees_the_slot() -> None:
    async def never_4(target: bytes, writer: asyncio.StreamWriter) -> bool:
        if target == b"/4":
            await asyncio.Event().wait()  # no answer: the client cancels first
        return await _ok(target, writer)

    async def main() -> None:
        async with _Server(never_4) as server:
            pool = ShardedTransport(max_connections=1)
            first = await pool.send("GET", server.url + "/1", {}, None, TIMEOUTS)
            # The only connection is busy: a second request waits, then gives up.
            with pytest.raises(httpx.PoolTimeout):
                await pool.send("GET", server.url + "/2", {}, None, {**TIMEOUTS, "pool": 0.1})
            waiting = asyncio.ensure_future(_get(pool, server.url + "/3"))
            await _until(lambda: bool(pool._pools[0]._waiters))
            assert not waiting.done()
            await first.aclose()  # unread: closed, and its slot goes to the waiting request
            _, body = await asyncio.wait_for(waiting, 5)
            assert body == b"ok /3"
            # A request cancelled while it waits for its answer gives its slot back too.
            stuck = asyncio.ensure_future(pool.send("GET", server.url + "/4", {}, None, TIMEOUTS))
            await _until(lambda: any(r[0].startswith(b"GET /4 ") for r in server.requests))
            stuck.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stuck
            _, body = await _get(pool, server.url + "/5")
            assert body == b"ok /5"
            await pool.aclose()

    _run(main())


def test_under_max_connections_a_returned_connection_serves_the_next_request() -> None:
    async def main() -> None:
        async with _Server() as server:
            pool = ShardedTransport(max_connections=2)
            for _ in range(3):
                bodies = await asyncio.gather(*(_get(pool, f"{server.url}/{i}")
                                                for i in range(8)))
                assert [b for _, b in bodies] == [b"ok /%d" % i for i in range(8)]
            await pool.aclose()
        assert server.accepted == 2  # 24 requests, never more than the 2 connections

    _run(main())


@pytest.mark.parametrize(("shards", "limit"), [(8, 3), (3, 10), (1, 4)])
def test_max_connections_bounds_all_shards_together(shards: int, limit: int) -> None:
    transport = ShardedTransport(shards, max_connections=limit)
    bounds = [pool._max for pool in transport._pools]
    assert sum(bounds) == limit and all(b is not None and b >= 1 for b in bounds)


def test_the_httpx_client_api_goes_through_the_same_pools() -> None:
    async def main() -> None:
        async with _Server() as server:
            client = pooled_client(shards=2)
            response = await client.get(server.url + "/hello", headers={"X-Session-ID": "s"})
            assert response.status_code == 200 and response.text == "ok /hello"
            assert response.headers.get_list("x-twice") == ["a", "b"]
            await client.aclose()
            with pytest.raises(httpx.ConnectError):
                await pooled_client().get("http://127.0.0.1:1/")
        assert server.accepted == 1

    _run(main())


def _self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for 127.0.0.1 and a client context trusting only its certificate."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


def test_https_verifies_the_certificate_and_reuses_the_connection(tmp_path: Path) -> None:
    server_ctx, client_ctx = _self_signed(tmp_path)

    async def main() -> None:
        async with _Server(ssl_context=server_ctx) as server:
            pool = Http11Pool(ssl_context=client_ctx)
            for i in range(3):
                request = httpcore.Request("GET", f"{server.url}/s{i}",
                                           headers=[(b"Host", b"127.0.0.1")],
                                           extensions={"timeout": TIMEOUTS})
                response = await pool.handle_async_request(request)
                body = b"".join([part async for part in response.stream])  # type: ignore[union-attr]
                await response.aclose()
                assert body == b"ok /s%d" % i
            await pool.aclose()
            # The default context (certifi's roots) refuses the self-signed certificate.
            transport = ShardedTransport()
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await _get(transport, server.url + "/")
            await transport.aclose()
        assert server.accepted == 1  # one connection for three requests (the refused
        # handshake never reaches the handler)

    _run(main())
