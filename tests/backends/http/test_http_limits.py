"""Local limits of the HTTP backend, against the real ORS server: connections to one
server are bounded (requests queue for one instead of opening one each), and running
out of file descriptors is reported as the local limit it is.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import httpx
import pytest

from ors_gym import AsyncOrsEnv
from ors_gym.backends.http import AsyncHttpBackend, HttpOptions, PooledTransport, pooled_transport

WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}


def test_tool_calls_over_the_per_host_bound_queue_for_a_connection(server_url: str) -> None:
    """Twelve sessions step at once over two connections: every call answers right,
    never more than two connections are open to the server, and calls that waited in
    the queue longer than ``timeout`` still run (the wait is this process's own)."""

    async def main() -> tuple[int, list[str]]:
        pool = pooled_transport(max_connections_per_host=2)
        assert isinstance(pool, PooledTransport)
        backend = AsyncHttpBackend(server_url, transport=pool, keepalive_interval=None,
                                   timeout=1.0)
        envs = [AsyncOrsEnv(backend=backend, env_name="latency") for _ in range(12)]
        most = 0
        running = True

        async def watch() -> None:
            nonlocal most
            while running:
                most = max(most, pool.open_to(server_url))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        try:
            await asyncio.gather(*(e.reset(options={"task_spec": {"delay_ms": 300}})
                                   for e in envs))
            results = await asyncio.gather(*(e.step(WAIT) for e in envs))
        finally:
            running = False
            await watcher
            await asyncio.gather(*(e.close() for e in envs))
            await backend.aclose()
            await pool.aclose()
        return most, [r[0]["text"] for r in results]

    most, texts = asyncio.run(main())
    assert texts == ["waited 1"] * 12  # 6 waves of 0.3 s: past timeout=1.0, no PoolTimeout
    assert 1 <= most <= 2


def test_the_bound_is_per_server_and_a_full_server_does_not_hold_up_another() -> None:
    """Two origins under ``max_connections_per_host=1``: while the first one's only
    connection is busy and a request queues for it, a request to the second goes out
    at once, on its own connection."""

    async def main() -> list[str]:
        release = asyncio.Event()
        accepted: list[int] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            port = writer.get_extra_info("sockname")[1]
            accepted.append(port)
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                if b"/slow" in head.split(b"\r\n", 1)[0]:
                    await release.wait()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
            writer.close()

        servers = [await asyncio.start_server(serve, "127.0.0.1", 0) for _ in range(2)]
        urls = [f"http://127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in servers]
        transport = PooledTransport(max_connections_per_host=1)
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:
            slow = asyncio.create_task(client.get(urls[0] + "/slow"))
            queued = asyncio.create_task(client.get(urls[0] + "/queued"))
            while not transport._pool._waiters:  # the second request to urls[0] waits
                await asyncio.sleep(0)
            other = await client.get(urls[1] + "/other")  # not behind urls[0]'s queue
            assert not queued.done() and transport.open_to(urls[0]) == 1
            release.set()
            answers = [other.text, (await slow).text, (await queued).text]
        for s in servers:
            s.close()
        assert len(accepted) == 2  # one connection to each server
        return answers

    assert asyncio.run(main()) == ["ok", "ok", "ok"]


def test_bad_per_host_bounds_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"max_connections_per_host must be None .* got 0"):
        PooledTransport(max_connections_per_host=0)
    with pytest.raises(ValueError, match=r"max_connections_per_host must be None .* got 0"):
        HttpOptions(max_connections_per_host=0)


_OUT_OF_FDS = textwrap.dedent("""
    import asyncio, json, resource, socket, sys
    from ors_gym import AsyncOrsEnv
    from ors_gym.backends.http import AsyncHttpBackend
    from ors_gym.errors import OrsError

    url = sys.argv[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    async def main():
        backend = AsyncHttpBackend(url, max_keepalive_connections=0, keepalive_interval=None,
                                   max_retries=0)
        env = AsyncOrsEnv(backend=backend, env_name="echo", on_error="raise")
        await env.reset()
        held = []
        try:
            while True:  # every descriptor this process may open, taken
                held.append(socket.socket())
        except OSError:
            pass
        out = {}
        for name, call in (("health", backend.health()),
                           ("step", env.step({"tool_calls": [
                               {"name": "echo", "arguments": {"text": "hi"}}]}))):
            try:
                await call
                out[name] = None
            except OrsError as exc:
                out[name] = [type(exc).__name__, str(exc)]
        for s in held:
            s.close()
        await env.close()
        await backend.aclose()
        print(json.dumps(out))

    asyncio.run(main())
""")


def test_running_out_of_file_descriptors_is_named_as_the_local_limit(server_url: str) -> None:
    """With RLIMIT_NOFILE lowered to 256 and every descriptor taken, a request and a
    tool call fail with an error naming the limit and how to raise it, never as a
    server to start."""
    run = subprocess.run([sys.executable, "-c", _OUT_OF_FDS, server_url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    for name in ("health", "step"):
        kind, message = out[name]
        assert kind == "OrsConnectionError", (name, message)
        assert "no file descriptor left" in message and "Errno 24" in message
        assert "256 soft" in message and "ulimit -n" in message
        assert "RLIMIT_NOFILE" in message and "max_connections_per_host" in message
        assert "ors-gym serve" not in message and "is it running" not in message


def test_a_connect_is_not_timed_out_by_a_stalled_loop() -> None:
    """The loop is busy for 1.5 s (as under thousands of sessions) while a connect with
    a 1 s timeout is under way: the connection is made, the stall is not counted."""
    import time

    from ors_gym.backends.http.transport._aio import AsyncioBackend

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        asyncio.get_running_loop().call_soon(time.sleep, 1.5)  # the loop does nothing else
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=1.0)
        await stream.aclose()
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_through_a_proxy_httpx_pool_is_bounded_by_the_per_host_bound() -> None:
    """Every connection through a proxy goes to one host: httpx's pool (which has no bound
    per host) gets the smaller of the two bounds."""
    from ors_gym.backends.http import EnvProxyTransport

    assert EnvProxyTransport(max_connections_per_host=3)._limits.max_connections == 3
    assert EnvProxyTransport(10, max_connections_per_host=30)._limits.max_connections == 10
    assert EnvProxyTransport(max_connections_per_host=None)._limits.max_connections is None
