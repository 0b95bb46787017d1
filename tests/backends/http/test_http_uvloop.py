"""``PooledTransport`` on uvloop's loop, which uvicorn picks whenever uvloop is
installed: its ``create_connection`` takes no ``happy_eyeballs_delay``, so the
network backend passes that only to asyncio's own loops. Skipped where uvloop is
not installed."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from ors_gym.backends.http.transport._pool import PooledTransport

uvloop = pytest.importorskip("uvloop")


async def _two_requests() -> tuple[list[str], int, type]:
    accepted = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(transport=PooledTransport(), timeout=5.0) as client:
            bodies = [(await client.get(f"http://127.0.0.1:{port}/")).text for _ in range(2)]
    finally:
        server.close()
        await server.wait_closed()
    return bodies, accepted, type(asyncio.get_running_loop())


def test_pooled_transport_connects_and_reuses_on_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        bodies, accepted, loop_type = runner.run(_two_requests())
    assert loop_type is uvloop.Loop
    assert bodies == ["ok", "ok"]
    assert accepted == 1  # the second request went on the kept-alive connection
