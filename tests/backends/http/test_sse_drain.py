"""What is left of a tool-call stream after its ``end`` event, against a real server.

A raw ASGI app under uvicorn on 127.0.0.1 answers ``/call`` of three
environments: ``closed`` ends the stream after ``end`` (as the SDK server
does), ``held`` keeps it open with a ping every few milliseconds until the
client goes (as a front door that holds streams open might), ``flood`` sends
more than ``DRAIN_LIMIT`` bytes of pings at once, then holds it open too. The
call must return its result at once in every case; a held stream's connection
is closed, never reused, and a closed stream's connection serves the next call.
Whatever happens to the stream after ``end`` (cut, past the size cap), the result stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ors_gym.backends.http import AsyncHttpBackend
from ors_gym.backends.http._settings import Where
from ors_gym.backends.http._sse import DRAIN_LIMIT, StreamAssembler
from ors_gym.protocol import RunToolSuccess, TextBlock
from tests._fault_servers import UvicornThread

RESULT = {"ok": True, "output": {"blocks": [{"type": "text", "text": "hi"}]}}
ANSWER = (b"event: task_id\ndata: t1\n\nevent: end\ndata: " + json.dumps(RESULT).encode()
          + b"\n\n")
PING = b": ping\n\n"
#: The longest a test waits for a call or for the server to see its client go: the drain
#: itself takes a fraction of a second, a stream held open without it lasts minutes.
BOUND_S = 20.0


class Doors:
    """The ASGI app: ``/list_environments`` and each environment's ``/call``; it keeps
    the client port of every call and counts the held streams whose client went away."""

    def __init__(self) -> None:
        self.ports: list[tuple[str, int]] = []
        self.gone = threading.Semaphore(0)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/list_environments":
            await _send(send, b"application/json", b'["closed", "held", "flood"]', done=True)
            return
        env = scope["path"].split("/")[1]
        self.ports.append((env, scope["client"][1]))
        await _send(send, b"text/event-stream", ANSWER, done=env == "closed")
        if env == "closed":
            return
        if env == "flood":
            await send({"type": "http.response.body", "body": PING * (2 * DRAIN_LIMIT // 8),
                        "more_body": True})
        pinging = asyncio.create_task(self._ping(send))
        while (await receive())["type"] != "http.disconnect":
            pass
        pinging.cancel()
        with contextlib.suppress(BaseException):  # cancelled, or its send met the hang-up
            await pinging
        self.gone.release()

    @staticmethod
    async def _ping(send: Any) -> None:
        while True:
            await send({"type": "http.response.body", "body": PING, "more_body": True})
            await asyncio.sleep(0.005)  # the server's ping cadence


async def _send(send: Any, content_type: bytes, body: bytes, *, done: bool) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": body, "more_body": not done})


def test_the_drain_after_end_is_bounded_and_a_held_connection_is_not_reused() -> None:
    app = Doors()
    with UvicornThread(app) as server:

        async def main() -> list[Any]:
            backend = AsyncHttpBackend(server.url, call_timeout=120, max_retries=0)
            try:
                results = []
                for env in ("closed", "closed", "held", "held", "flood", "closed"):
                    call = backend.call(env, "sid-1", "echo", {})
                    results.append(await asyncio.wait_for(call, BOUND_S))
                return results
            finally:
                await backend.aclose()

        results = asyncio.run(main())
        assert all(isinstance(r, RunToolSuccess) and r.output.blocks == [TextBlock(text="hi")]
                   for r in results)
        for _ in range(3):  # both held streams and the flood: the client hung up on each
            assert app.gone.acquire(timeout=BOUND_S)
    envs, ports = zip(*app.ports, strict=True)
    assert envs == ("closed", "closed", "held", "held", "flood", "closed")
    assert ports[0] == ports[1] == ports[2]  # a stream that ended leaves its connection reusable
    assert len(set(ports[2:])) == 4  # a held one does not: each later call came on a new one


def test_nothing_after_the_answer_fails_the_call() -> None:
    """A stream cut, or running past the size cap, once ``end`` is in: the result stands."""
    async def cut() -> AsyncIterator[bytes]:
        yield ANSWER
        raise httpx.ReadError("connection reset")

    async def chatty() -> AsyncIterator[bytes]:
        yield ANSWER
        while True:
            yield PING * 100

    for pieces in (cut(), chatty()):
        sink = StreamAssembler(max_bytes=len(ANSWER) + 100, what="call",
                               where=Where(server="http://x"))
        asyncio.run(sink.read(pieces))
        assert sink.done and sink.error is None and sink.result() == RESULT
