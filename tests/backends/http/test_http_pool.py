"""The async HTTP stack under ``AsyncHttpBackend``: the asyncio network backend, the
lean HTTP/1.1 pool and ``PooledTransport``, mounted in a plain ``httpx.AsyncClient``,
against real sockets on 127.0.0.1.

A small asyncio HTTP/1.1 server (``_Server``) answers with what each test
needs (keep-alive, a server-side close, silence, a long body, a redirect, TLS)
and counts the connections it accepted, so reuse and closing are observed
from the server's side.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from ors_gym.backends.http.transport._aio import poll_readable, select_readable
from ors_gym.backends.http.transport._http11 import Http11Pool
from ors_gym.backends.http.transport._pool import (
    IdleConnectionClosedError,
    PooledTransport,
    pooled_transport,
)

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


def _client(transport: httpx.AsyncBaseTransport, **kwargs: Any) -> httpx.AsyncClient:
    """A plain httpx client mounting ``transport``."""
    return httpx.AsyncClient(transport=transport, **kwargs)


def test_a_plain_client_reuses_one_connection_and_sends_what_httpx_sends() -> None:
    async def main() -> None:
        async with _Server() as server:
            transport = PooledTransport()
            async with _client(transport) as client:
                for i in range(5):
                    response = await client.get(f"{server.url}/p?i={i}")
                    assert (response.status_code, response.content) == (200, b"ok /p?i=%d" % i)
                assert response.headers["content-type"] == "text/plain"
                assert response.headers.get_list("x-twice") == ["a", "b"]
                post = await client.post(server.url + "/delete", content=b'{"a":1}')
                assert post.status_code == 200
            assert transport.open_connections == 0  # the client's close closed the transport
        assert server.accepted == 1  # five GETs and a POST over one connection
        line, headers, body = server.requests[-1]
        assert line == b"POST /delete HTTP/1.1" and body == b'{"a":1}'
        assert headers[b"host"] == server.url.split("//")[1].encode()
        assert headers[b"content-length"] == b"7"
        _, headers, _ = server.requests[0]
        assert b"content-length" not in headers  # a GET without a body says nothing of it

    _run(main())


def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def close_after(target: bytes, writer: asyncio.StreamWriter) -> bool:
        await _ok(target, writer)
        return target != b"/last"

    async def main() -> None:
        async with _Server(close_after) as server:
            async with _client(PooledTransport()) as client:
                await client.get(server.url + "/last")
                await server.closed.wait()  # the server closed it; the next request must not care
                for _ in range(3):
                    response = await client.get(server.url + "/again")
                    assert response.content == b"ok /again"
        assert server.accepted == 2

    _run(main())


def test_an_unread_body_closes_its_connection() -> None:
    async def main() -> None:
        async with _Server() as server:
            async with _client(PooledTransport()) as client:
                async with client.stream("GET", server.url + "/a"):
                    pass  # body never read: the connection cannot be reused
                response = await client.get(server.url + "/b")
                assert response.content == b"ok /b"
        assert server.accepted == 2

    _run(main())


def test_errors_are_httpx_exceptions_and_free_their_connections() -> None:
    async def silent(target: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(30)
        return False

    async def main() -> None:
        transport = PooledTransport()
        async with _Server(silent) as server:
            client = _client(transport, timeout=httpx.Timeout(5.0, read=0.2))
            with pytest.raises(httpx.ReadTimeout) as err:
                await client.get(server.url + "/")
            assert isinstance(err.value.__cause__, httpcore.ReadTimeout)
            url = server.url
        with pytest.raises(httpx.ConnectError):
            await client.get(url + "/")
        assert transport.open_connections == 0
        with pytest.raises(httpx.UnsupportedProtocol, match="not an absolute http"):
            await transport.handle_async_request(httpx.Request("GET", "ftp://127.0.0.1/"))
        await client.aclose()

    _run(main())


def test_a_long_body_streams_through_flow_control() -> None:
    big = bytes(range(256)) * 8192  # 2 MiB: the protocol pauses reading past its buffer

    async def large(target: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big))
        for i in range(0, len(big), 65536):
            writer.write(big[i:i + 65536])
            await writer.drain()
        return True

    async def main() -> None:
        async with _Server(large) as server:
            async with _client(PooledTransport()) as client:
                async with client.stream("GET", server.url + "/") as response:
                    stream = response.extensions["network_stream"]
                    await _until(lambda: stream._paused_reading)  # buffer full: reading paused
                    parts = [part async for part in response.aiter_raw()]
                assert len(parts) > 1 and b"".join(parts) == big  # it came in pieces
                again = await client.get(server.url + "/")
                assert again.content == big
        assert server.accepted == 1

    _run(main())


def test_max_connections_waits_then_times_out_and_cancelling_frees_the_slot() -> None:
    async def never_4(target: bytes, writer: asyncio.StreamWriter) -> bool:
        if target == b"/4":
            await asyncio.Event().wait()  # no answer: the client cancels first
        return await _ok(target, writer)

    async def main() -> None:
        async with _Server(never_4) as server:
            transport = PooledTransport(max_connections=1)
            client = _client(transport, timeout=5.0)
            first = await client.send(client.build_request("GET", server.url + "/1"),
                                      stream=True)
            # The only connection is busy: a second request waits, then gives up.
            with pytest.raises(httpx.PoolTimeout, match="max_connections=1"):
                await client.get(server.url + "/2", timeout=httpx.Timeout(5.0, pool=0.1))
            waiting = asyncio.ensure_future(client.get(server.url + "/3"))
            await _until(lambda: bool(transport._pool._waiters))
            assert not waiting.done()
            await first.aclose()  # unread: closed, and its slot goes to the waiting request
            assert (await asyncio.wait_for(waiting, 5)).content == b"ok /3"
            # A request cancelled while it waits for its answer gives its slot back too.
            stuck = asyncio.ensure_future(client.get(server.url + "/4"))
            await _until(lambda: any(r[0].startswith(b"GET /4 ") for r in server.requests))
            stuck.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stuck
            assert (await client.get(server.url + "/5")).content == b"ok /5"
            await client.aclose()

    _run(main())


def test_waiters_are_served_before_newcomers() -> None:
    async def main() -> None:
        async with _Server() as server:
            transport = PooledTransport(max_connections=1)
            client = _client(transport, timeout=5.0)
            served: list[str] = []

            async def get(name: str) -> None:
                answer = await client.get(f"{server.url}/{name}")
                served.append(answer.text)

            first = await client.send(client.build_request("GET", server.url + "/a"),
                                      stream=True)
            waiter = asyncio.ensure_future(get("waiter"))
            await _until(lambda: bool(transport._pool._waiters))
            await first.aread()
            await first.aclose()  # the connection comes back with a request waiting...
            await get("newcomer")  # ...and a newcomer asks before the waiter could run
            await waiter
            assert served == ["ok /waiter", "ok /newcomer"]
            assert server.accepted == 1
            await client.aclose()

    _run(main())


def test_a_kept_alive_connection_closed_unread_is_reported_as_closed_while_idle() -> None:
    async def close_second(target: bytes, writer: asyncio.StreamWriter) -> bool:
        if target.endswith(b"/close"):
            return False  # closed with no answer, as a server whose idle timer just fired
        return await _ok(target, writer)

    async def main() -> None:
        async with _Server(close_second) as server:
            async with _client(PooledTransport()) as client:
                with pytest.raises(httpx.RemoteProtocolError) as fresh:
                    await client.get(server.url + "/close")  # a new connection: not idle
                assert not isinstance(fresh.value, IdleConnectionClosedError)
                assert (await client.get(server.url + "/1")).content == b"ok /1"
                with pytest.raises(IdleConnectionClosedError, match="while it was idle"):
                    await client.get(server.url + "/close")
                assert (await client.get(server.url + "/2")).content == b"ok /2"
        assert server.accepted == 3

    _run(main())


def test_under_max_connections_a_returned_connection_serves_the_next_request() -> None:
    async def main() -> None:
        async with _Server() as server:
            async with _client(PooledTransport(max_connections=2)) as client:
                for _ in range(3):
                    answers = await asyncio.gather(*(client.get(f"{server.url}/{i}")
                                                     for i in range(8)))
                    assert [a.content for a in answers] == [b"ok /%d" % i for i in range(8)]
        assert server.accepted == 2  # 24 requests, never more than the 2 connections

    _run(main())


def test_close_drops_idle_connections_and_the_transport_stays_usable() -> None:
    async def main() -> None:
        async with _Server() as server:
            transport = PooledTransport()
            client = _client(transport)
            await asyncio.gather(*(client.get(f"{server.url}/{i}") for i in range(3)))
            assert transport.open_connections == 3
            await transport.aclose()
            assert transport.open_connections == 0
            assert (await client.get(server.url + "/after")).content == b"ok /after"
            await client.aclose()
        assert server.accepted == 4

    _run(main())


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"max_connections": 0}, "max_connections must be None .* got 0"),
    ({"max_keepalive_connections": -1}, "max_keepalive_connections must be None .* got -1"),
])
def test_bad_limits_are_refused_by_name(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PooledTransport(**kwargs)


def test_pooled_transport_is_one_shared_transport_any_client_can_mount() -> None:
    async def main() -> None:
        async with _Server() as server:
            pool = pooled_transport(max_connections=1)
            assert isinstance(pool, PooledTransport)
            client = httpx.AsyncClient(transport=pool)
            answers = await asyncio.gather(*(client.get(f"{server.url}/{i}") for i in range(4)))
            assert [a.text for a in answers] == [f"ok /{i}" for i in range(4)]
            await client.aclose()
            with pytest.raises(httpx.ConnectError):
                await httpx.AsyncClient(transport=pooled_transport()).get("http://127.0.0.1:1/")
        assert server.accepted == 1

    _run(main())


@pytest.mark.parametrize("readable", [poll_readable, select_readable],
                         ids=["poll", "select"])
def test_an_idle_socket_is_readable_once_bytes_or_its_end_arrive(
    readable: Callable[[int], bool],
) -> None:
    if readable is poll_readable and not hasattr(__import__("select"), "poll"):
        pytest.skip("this platform has no select.poll (the select fallback is used)")
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert not readable(ours.fileno())
        theirs.send(b"x")
        assert readable(ours.fileno())
        ours.recv(1)
        assert not readable(ours.fileno())
        theirs.close()  # the peer's end reads as b"": readable
        assert readable(ours.fileno())


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
            async with _client(PooledTransport()) as client:
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await client.get(server.url + "/")
        assert server.accepted == 1  # one connection for three requests (the refused
        # handshake never reaches the handler)

    _run(main())
