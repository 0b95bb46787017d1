"""Reliability and security: dropped connections, slow, dying and hostile servers, leaks, secrets.

Every test talks to REAL servers (the SDK ``Server`` under uvicorn on
127.0.0.1:0), through a REAL loopback TCP proxy the test controls where a
connection must fail (``tests/_hostile.py``, ``tests/_fault_servers.py``).
What is proven, mostly through ``OrsEnv`` itself:

1. a tool-call stream cut mid-flight resumes by its task id and the tool runs
   exactly once; a server gone mid-episode is a typed error naming server and
   session (or ``truncated`` under ``on_error="truncate"``), and the next
   ``reset`` works against a fresh server on the same port;
2. a "starting" server is ridden out, a slow tool meets ``call_timeout``, the
   keepalive keeps an idle session past the reaper;
3. a reaped session is ``OrsSessionExpired`` (or a ``session_lost`` truncation);
4. hostile answers are clear ``OrsError``s within the response-size cap and a
   time bound, with the client's peak memory measured;
5. broken images become observation notes;
6. no sessions, sockets or threads leak over 1,000 episodes, closed or abandoned;
7. the API key and secrets never reach a log record, repr, error or trajectory;
8. fuzzed actions only ever raise ``OrsActionError``.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import io
import json
import logging
import math
import re
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openreward.environments import (
    Environment,
    ImageBlock,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
    tool,
)
from PIL import Image
from pydantic import BaseModel

from ors_gym import _cleanup
from ors_gym.backends.http._codec import secrets_header
from ors_gym.backends.local import LocalBackend
from ors_gym.env import OrsEnv
from ors_gym.envs.counter import Counter
from ors_gym.envs.math import Math
from ors_gym.envs.testing.echo import Echo
from ors_gym.envs.toolbox import Toolbox
from ors_gym.errors import (
    OrsActionError,
    OrsConnectionError,
    OrsError,
    OrsProtocolError,
    OrsRequestError,
    OrsServerError,
    OrsSessionExpired,
    OrsTimeoutError,
    OrsToolError,
)
from ors_gym.serving import ServerThread
from ors_gym.trajectories import read_trajectories
from ors_gym.wrappers.recording import RecordTrajectories
from tests._fault_servers import FastReaper, FaultyApp, UvicornThread, wait_for
from tests._hostile import (
    FlakyProxy,
    HostileServer,
    answer,
    gzip_bomb,
    open_sockets,
    png_bomb,
    png_with_size,
    redirect_loop,
    redirect_to,
    sse,
    streamed,
)
from tests._test_envs import GATE, Probe, digest

pytestmark = pytest.mark.timeout(120)


# -- SDK environments made for these tests ----------------------------------------------------


def _png(width: int = 4, height: int = 3, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buf, "PNG")
    return buf.getvalue()


def _tiff() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (2, 2)).save(buf, "TIFF")
    return buf.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


#: kind -> (base64 data, mimeType, words the observation note must contain)
BAD_IMAGES: dict[str, tuple[Callable[[], str], str, tuple[str, ...]]] = {
    "invalid_base64": (lambda: "@@not*base64!!" * 8, "image/png", ("not valid base64",)),
    "truncated_png": (lambda: _b64(_png(64, 64)[:60]), "image/png", ("truncated", "PNG")),
    "decompression_bomb": (lambda: _b64(png_bomb()), "image/png", ("decompression bomb",)),
    "declared_huge": (lambda: _b64(png_with_size(100_000, 100_000)), "image/png",
                      ("decompression bomb", "max_pixels")),
    "unknown_mime": (lambda: _b64(b"\x00\x01binary blob of no known format"),
                     "application/x-unknown", ("application/x-unknown", "not an image type")),
    "refused_format": (lambda: _b64(_tiff()), "image/tiff", ("not a PNG, JPEG",)),
    "empty": (lambda: "", "image/png", ("empty",)),
}


class ShowInput(BaseModel):
    kind: str


class BadImages(Environment):
    """Returns a broken image between a text block and a good image; its prompt has one too."""

    @classmethod
    def list_splits(cls) -> list[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[JSONObject]:
        return [{"kind": kind} for kind in BAD_IMAGES]

    async def get_prompt(self) -> list[TextBlock | ImageBlock]:
        data, mime, _ = BAD_IMAGES[self.task_spec["kind"]]
        return [TextBlock(text="look:"), ImageBlock(data=data(), mimeType=mime)]

    @tool
    async def show(self, params: ShowInput) -> ToolOutput:
        """A text block, the broken image ``kind``, then a good 4x3 PNG."""
        data, mime, _ = BAD_IMAGES[params.kind]
        return ToolOutput(
            blocks=[
                TextBlock(text=f"showing {params.kind}"),
                ImageBlock(data=data(), mimeType=mime),
                ImageBlock(data=_b64(_png()), mimeType="image/png"),
            ],
            reward=0.0,
        )


class SlowStart(Environment):
    """``setup()`` lasts until the server has answered ``/prompt`` with 503 "starting" twice.

    ``answered`` is set by the test to a callable counting those answers, so the
    wait ends on what the client was told, not on a clock.
    """

    answered: ClassVar[Callable[[], int]] = staticmethod(lambda: 2)

    @classmethod
    def list_splits(cls) -> list[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[JSONObject]:
        return [{"id": 0}]

    async def setup(self) -> None:
        deadline = time.monotonic() + 30
        while type(self).answered() < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="ready at last")]

    @tool
    async def ping_tool(self) -> ToolOutput:
        """Answer 'pong'."""
        return ToolOutput(blocks=[TextBlock(text="pong")], reward=0.0)


ENVS: list[type] = [Echo, Probe, BadImages, Counter]


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    with ServerThread(ENVS) as server:
        yield server


def _call(tool_name: str, /, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool_name, "arguments": arguments}]}


def _fast(**extra: Any) -> dict[str, Any]:
    """Backend options with quick retries (the defaults back off for seconds)."""
    return {"max_retries": 3, "backoff": 0.02, **extra}


# == 1. connection faults =======================================================================


def test_cut_stream_resumes_through_step_and_the_tool_runs_once(srv: ServerThread) -> None:
    token = uuid.uuid4().hex
    with FlakyProxy(srv.url, cut_every=1, max_cuts=1) as proxy:
        env = OrsEnv(base_url=proxy.url, env_name="echo", backend_options=_fast())
        try:
            env.reset(seed=0)
            obs, reward, terminated, truncated, info = env.step(
                _call("slow_count", token=token, seconds=0.3)
            )
            assert proxy.cuts == 1  # the stream really was cut after its task_id event
            assert obs["text"] == "1"  # the result of the one run, delivered after resuming
            assert (reward, terminated, truncated) == (0.0, False, False)
            assert info["calls"][0]["ok"] and "truncation_reason" not in info
            obs, *_ = env.step(_call("count", token=token))
            assert obs["text"] == "1"
        finally:
            env.close()
    assert Echo.counts[token] == 1  # counted server-side: the tool ran exactly once


def test_outage_after_the_cut_is_ridden_out_and_the_tool_runs_once(srv: ServerThread) -> None:
    # The stream is cut after its acknowledgement, then the next 3 connections
    # are reset (the server is unreachable for a moment): the resume retries
    # through the outage and collects the one result.
    token = uuid.uuid4().hex
    with FlakyProxy(srv.url, cut_every=1, max_cuts=1, reject_after_cut=3) as proxy:
        env = OrsEnv(base_url=proxy.url, env_name="echo",
                     backend_options=_fast(max_retries=5))
        try:
            env.reset(seed=0)
            obs, _, _, truncated, info = env.step(_call("slow_count", token=token, seconds=0.2))
            # The async pool may resume over a connection it already holds (reset asks
            # /prompt and /tools at once, so two are open): then no new one is rejected.
            assert proxy.cuts == 1 and proxy.rejected in (0, 3)
            assert obs["text"] == "1" and not truncated and info["calls"][0]["ok"]
        finally:
            env.close()
    assert Echo.counts[token] == 1


@pytest.mark.parametrize("on_error", ["raise", "truncate"])
def test_proxy_stops_forwarding_mid_episode(srv: ServerThread, on_error: str) -> None:
    with FlakyProxy(srv.url) as proxy:
        env = OrsEnv(base_url=proxy.url, env_name="echo", on_error=on_error,  # type: ignore[arg-type]
                     backend_options=_fast(max_retries=1))
        try:
            env.reset(seed=0)
            sid = env.session_id
            assert sid is not None
            assert env.step(_call("echo", text="before"))[0]["text"] == "before"
            proxy.stop()  # the port now refuses connections, as for a killed server
            if on_error == "raise":
                with pytest.raises(OrsConnectionError) as err:
                    env.step(_call("echo", text="lost"))
                text = str(err.value)
                assert f"127.0.0.1:{proxy.port}" in text and sid in text
                assert (err.value.session_id, err.value.tool) == (sid, "echo")
            else:
                obs, _, terminated, truncated, info = env.step(_call("echo", text="lost"))
                assert (terminated, truncated) == (False, True)
                assert info["truncation_reason"] == "session_lost"
                assert sid in info["error"] and f"127.0.0.1:{proxy.port}" in info["error"]
                assert env.observation_space.contains(obs) and "ended" in obs["text"]

            with ServerThread([Echo]) as fresh:
                proxy.start(fresh.url)  # a fresh server on the same port
                obs, info = env.reset(seed=1)
                new_sid = info["session_id"]
                assert new_sid != sid and new_sid in fresh.sdk_server._active_envs
                assert env.step(_call("echo", text="after"))[0]["text"] == "after"
                env.close()
                assert new_sid not in fresh.sdk_server._active_envs
        finally:
            env.close()


# == 2. slow and starting servers ===============================================================


def test_starting_server_is_ridden_out_by_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    import openreward.environments.server as sdk_server

    # The SDK answers 503 "starting" after 25 s of setup(); make that 50 ms, and
    # its Retry-After 1 s, so the real server's own answer is met quickly.
    monkeypatch.setattr(sdk_server, "_SETUP_WAIT_TIMEOUT_S", 0.05)
    monkeypatch.setattr(sdk_server, "_SETUP_WAIT_RETRY_AFTER_S", 1)
    with HostileServer([SlowStart]) as hs:
        starting = ("/slowstart/prompt", 503)
        monkeypatch.setattr(SlowStart, "answered", lambda: hs.app.answered[starting])
        # max_retries=0: riding out "starting" must not spend the retry budget
        env = OrsEnv(base_url=hs.url, env_name="slowstart", backend_options={"max_retries": 0})
        try:
            obs, _ = env.reset(seed=0)
            assert obs["text"] == "ready at last"
            assert hs.app.answered[starting] == 2
            assert hs.app.answered[("/slowstart/prompt", 200)] == 1
            assert env.step(_call("ping_tool"))[0]["text"] == "pong"
        finally:
            env.close()


@pytest.mark.parametrize("on_error", ["raise", "truncate"])
def test_tool_slower_than_call_timeout(srv: ServerThread, on_error: str) -> None:
    GATE.clear()
    env = OrsEnv(base_url=srv.url, env_name="probe", on_error=on_error,  # type: ignore[arg-type]
                 call_timeout=0.5)
    try:
        env.reset(seed=0)
        sid = env.session_id
        assert sid is not None
        if on_error == "raise":
            with pytest.raises(OrsTimeoutError, match=r"call_timeout=0\.5") as err:
                env.step(_call("wait_gate"))
            assert (err.value.tool, err.value.session_id) == ("wait_gate", sid)
            assert "still be running" in str(err.value)
            # Named as the env's user sets it, never as a backend class they did not build.
            assert "OrsEnv(call_timeout=...)" in str(err.value)
            assert "HttpBackend" not in str(err.value)
        else:
            _, _, terminated, truncated, info = env.step(_call("wait_gate"))
            assert (terminated, truncated) == (False, True)
            assert "call_timeout=0.5" in info["error"]
        GATE.set()
        _, info = env.reset(seed=1)
        # the timed-out episode's session is not left open (and kept alive) on the server
        wait_for(lambda: sid not in srv.sdk_server._active_envs, 10,
                 "the timed-out session to be deleted")
        assert sid not in env.backend.open_sessions  # type: ignore[attr-defined]
    finally:
        GATE.set()
        env.close()


@pytest.fixture(scope="module")
def reaping() -> Iterator[tuple[ServerThread, FastReaper]]:
    """A server whose idle sessions are reaped after 1 s instead of 900 s."""
    with ServerThread([Echo]) as server, FastReaper(server, idle=1.0) as reaper:
        yield server, reaper


def test_keepalive_holds_a_session_while_the_policy_thinks(
    reaping: tuple[ServerThread, FastReaper],
) -> None:
    server, reaper = reaping
    kept = OrsEnv(base_url=server.url, env_name="echo",
                  backend_options={"keepalive_interval": 0.2})
    idle = OrsEnv(base_url=server.url, env_name="echo",
                  backend_options={"keepalive_interval": None})
    try:
        kept.reset(seed=0)
        idle.reset(seed=0)
        start = time.monotonic()
        # the policy "thinks" for over three reap windows
        wait_for(lambda: idle.session_id in reaper.reaped and reaper.last_sweep - start > 3.0,
                 timeout=30, what="three reap windows")
        assert kept.session_id not in reaper.reaped
        obs, _, _, truncated, _ = kept.step(_call("echo", text="still here"))
        assert obs["text"] == "still here" and not truncated
    finally:
        kept.close()
        idle.close()


# == 3. session expiry ===========================================================================


@pytest.mark.parametrize("on_error", ["raise", "truncate"])
def test_reaped_session_is_expired_not_a_hang(
    reaping: tuple[ServerThread, FastReaper], on_error: str
) -> None:
    server, reaper = reaping
    env = OrsEnv(base_url=server.url, env_name="echo", on_error=on_error,  # type: ignore[arg-type]
                 backend_options={"keepalive_interval": None})
    try:
        env.reset(seed=0)
        sid = env.session_id
        wait_for(lambda: sid in reaper.reaped, timeout=30, what="the reaper")
        if on_error == "raise":
            with pytest.raises(OrsSessionExpired, match="reset") as err:
                env.step(_call("echo", text="x"))
            assert sid is not None and err.value.session_id == sid and sid in str(err.value)
        else:
            obs, _, terminated, truncated, info = env.step(_call("echo", text="x"))
            assert (terminated, truncated) == (False, True)
            assert info["truncation_reason"] == "session_lost" and sid in info["error"]
            assert env.observation_space.contains(obs)
        _, info = env.reset(seed=1)  # a new episode works straight away
        assert info["session_id"] != sid
        assert env.step(_call("echo", text="y"))[0]["text"] == "y"
    finally:
        env.close()


# == 4. hostile or broken servers ===============================================================

#: The response-size cap the hostile tests configure, and the memory bound they assert.
CAP = 1_000_000
MEMORY_BOUND = 3 * CAP
#: Wall-clock bound on any one hostile exchange (retries included).
TIME_BOUND = 10.0
ACK = b"event: task_id\r\ndata: 0123abcd\r\n\r\n"


def _end(payload: bytes) -> bytes:
    return ACK + b"event: end\r\ndata: " + payload + b"\r\n\r\n"


def _bounded(fn: Callable[[], Any], seconds: float = TIME_BOUND) -> tuple[Any, int]:
    """Run ``fn`` in a thread; its result or exception, and the traced peak memory.

    Fails if ``fn`` is still running after ``seconds``. The peak covers every
    thread (the in-process server's streaming too, which is small by design).
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:
            outcome["value"] = exc

    gc.collect()
    tracemalloc.start()
    try:
        worker = threading.Thread(target=run, name="hostile-exchange", daemon=True)
        worker.start()
        worker.join(seconds)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if worker.is_alive():
        pytest.fail(f"the exchange was still running after {seconds} s (no bound on time)")
    return outcome["value"], peak


@pytest.fixture(scope="module")
def hostile_server() -> Iterator[HostileServer]:
    with HostileServer([Echo]) as hs:
        yield hs


@pytest.fixture
def hostile(hostile_server: HostileServer) -> Iterator[tuple[HostileServer, OrsEnv]]:
    """The hostile server (plans cleared) and an OrsEnv on it, reset, with the size cap."""
    hostile_server.app.reset()
    env = OrsEnv(base_url=hostile_server.url, env_name="echo",
                 backend_options=_fast(max_response_bytes=CAP, call_timeout=3.0))
    env.reset(seed=0)
    env.step(_call("echo", text="warm"))  # imports and pools are warm before measuring
    yield hostile_server, env
    hostile_server.app.reset()
    env.close()


_WRONG_SHAPES = [
    b"5", b"null", b'"text"', b"[1, 2]", b'{"ok": true, "output": 5}', b'{"ok": false}',
    b'{"ok": true, "output": {"blocks": 7}}', b'{"ok": "maybe", "output": {}}',
    b'{"ok": true, "output": {"blocks": [{"type": "text", "text": 5}]}}',
]

#: The error type (or types) a hostile case may raise.
Expected = type[OrsError] | tuple[type[OrsError], ...]

#: case -> (responder factory, planned times (None: every request), error type, message regex)
CALL_CASES: dict[str, tuple[Callable[[], Any], int | None, Expected, str]] = {
    "malformed_sse_no_events": (
        lambda: sse(b"garbage\x00\xff line\r\nmore: junk\r\n\r\ndata: orphan\r\n\r\n"), 1,
        (OrsProtocolError, OrsConnectionError), "ended before its result|not .*SSE|malformed"),
    "malformed_sse_acked_then_junk": (
        lambda: sse(ACK + b"\xff\xfe not sse at all \r\n\r\n"), None,
        (OrsProtocolError, OrsConnectionError), "ended before its result|malformed"),
    "invalid_json_in_end": (lambda: sse(_end(b'{"ok": true, "output": {')), 1,
                            OrsProtocolError, "not valid JSON"),
    **{
        f"wrong_shape_{i}": (partial(lambda b: sse(_end(b)), body), 1, OrsProtocolError,
                             "malformed /echo/call result")
        for i, body in enumerate(_WRONG_SHAPES)
    },
    "50MB_result_in_chunks": (
        lambda: streamed(ACK, b"event: chunk\r\ndata: " + b"x" * 4096 + b"\r\n\r\n",
                         total=50_000_000, tail=b"event: end\r\ndata: \r\n\r\n"), 1,
        OrsProtocolError, f"max_response_bytes={CAP}"),
    "50MB_result_in_one_event": (
        lambda: streamed(ACK + b"event: end\r\ndata: ", b"x" * 65536, total=50_000_000,
                         tail=b"\r\n\r\n"), 1,
        OrsProtocolError, f"max_response_bytes={CAP}"),
    "unbounded_chunk_events": (
        lambda: streamed(ACK, b"event: chunk\r\ndata: " + b"y" * 4096 + b"\r\n\r\n"), 1,
        OrsProtocolError, f"max_response_bytes={CAP}"),
    "unbounded_pings_past_call_timeout": (
        lambda: streamed(ACK, b": ping\r\n\r\n", interval=0.05), 1,
        OrsTimeoutError, r"call_timeout=3\.0"),
    "wrong_content_type": (lambda: answer(200, _end(b"{}"), "application/json"), 1,
                           OrsProtocolError, "text/event-stream"),
    "html_error_page": (
        lambda: answer(500, b"<html><body>" + b"<p>Internal error</p>" * 20_000 + b"</body></html>",
                       "text/html"), 1,
        OrsServerError, r"failed on the server \(500\)"),
    "html_gateway_page": (lambda: answer(502, b"<html>Bad Gateway</html>", "text/html"), None,
                          OrsServerError, r"\(502\)"),
    "redirect_loop": (lambda: redirect_loop(307), None, (OrsProtocolError, OrsRequestError),
                      "redirect"),
    "gzip_bomb_stream": (
        lambda: gzip_bomb(50_000_000, "text/event-stream", head=ACK,
                          filler=b"event: chunk\r\ndata: " + b"z" * 4096 + b"\r\n\r\n"), 1,
                         OrsProtocolError, f"max_response_bytes={CAP}"),
    "corrupt_gzip": (
        lambda: answer(200, _end(b"{}"), "text/event-stream", {"content-encoding": "gzip"}), 1,
        (OrsProtocolError, OrsConnectionError), "gzip|decod|compress"),
}


@pytest.mark.parametrize("case", list(CALL_CASES))
def test_hostile_tool_call_answers(hostile: tuple[HostileServer, OrsEnv], case: str) -> None:
    hs, env = hostile
    responder, times, error, pattern = CALL_CASES[case]
    hs.app.plan("/echo/call", responder(), times=times)
    outcome, peak = _bounded(lambda: env.step(_call("echo", text="x")))
    assert isinstance(outcome, error), f"{case}: got {type(outcome).__name__}: {outcome}"
    assert isinstance(outcome, OrsError)
    text = str(outcome)
    assert re.search(pattern, text), text
    assert len(text) < 5_000  # a clear message, not a dump of what the server sent
    assert outcome.tool == "echo" and outcome.session_id == env.session_id
    assert peak < MEMORY_BOUND, f"{case}: peak {peak:,} B over {MEMORY_BOUND:,} B"
    # no crash: the same env goes on once the server behaves
    hs.app.reset()
    env.reset(seed=1)
    assert env.step(_call("echo", text="fine"))[0]["text"] == "fine"


def test_hostile_answer_truncates_under_on_error_truncate(hostile_server: HostileServer) -> None:
    hs = hostile_server
    hs.app.reset()
    env = OrsEnv(base_url=hs.url, env_name="echo", on_error="truncate",
                 backend_options=_fast(max_response_bytes=CAP))
    try:
        env.reset(seed=0)
        hs.app.plan("/echo/call", sse(_end(b'{"ok": true, "output": 5}')))
        obs, _, terminated, truncated, info = env.step(_call("echo", text="x"))
        assert (terminated, truncated) == (False, True)
        assert info["truncation_reason"] == "server_error" and "malformed" in info["error"]
        assert env.observation_space.contains(obs)
    finally:
        hs.app.reset()
        env.close()


#: Hostile answers met during reset: path suffix -> (responder, times, error, regex).
RESET_CASES: dict[str, tuple[str, Callable[[], Any], int | None, Expected, str]] = {
    "html_create": ("/create", lambda: answer(200, b"<html>welcome</html>", "text/html"), 1,
                    OrsProtocolError, "expected a JSON answer"),
    "wrong_shape_prompt": ("/echo/prompt", lambda: answer(200, b'[{"type": "text"}]'), 1,
                           OrsProtocolError, "malformed /echo/prompt"),
    "wrong_shape_task_tools": ("/echo/task_tools", lambda: answer(200, b"[]"), 1,
                               OrsProtocolError, "malformed /echo/task_tools"),
    "50MB_prompt": ("/echo/prompt",
                    lambda: streamed(b"[", b" " * 65536, total=50_000_000, tail=b"]",
                                     content_type="application/json"), 1,
                    OrsProtocolError, f"max_response_bytes={CAP}"),
    "gzip_bomb_prompt": ("/echo/prompt", lambda: gzip_bomb(50_000_000), 1,
                         OrsProtocolError, f"max_response_bytes={CAP}"),
    "redirect_loop_prompt": ("/echo/prompt", lambda: redirect_loop(302), None,
                             (OrsProtocolError, OrsRequestError), "redirect"),
    "corrupt_gzip_prompt": ("/echo/prompt",
                            lambda: answer(200, b"[]", headers={"content-encoding": "gzip"}), 1,
                            (OrsProtocolError, OrsConnectionError), "gzip|decod|compress"),
}


@pytest.mark.parametrize("case", list(RESET_CASES))
def test_hostile_answers_during_reset(hostile: tuple[HostileServer, OrsEnv], case: str) -> None:
    hs, env = hostile
    suffix, responder, times, error, pattern = RESET_CASES[case]
    hs.app.plan(suffix, responder(), times=times)
    outcome, peak = _bounded(lambda: env.reset(seed=2))
    assert isinstance(outcome, error), f"{case}: got {type(outcome).__name__}: {outcome}"
    assert re.search(pattern, str(outcome)), str(outcome)
    assert peak < MEMORY_BOUND, f"{case}: peak {peak:,} B over {MEMORY_BOUND:,} B"
    hs.app.reset()
    obs, _ = env.reset(seed=3)
    assert "Echo test bench" in obs["text"]


def test_trickling_answer_meets_the_request_timeout(hostile_server: HostileServer) -> None:
    # One byte every 100 ms never trips a per-read timeout; ``timeout`` is
    # documented to bound each ordinary request (``setup_timeout`` the prompt,
    # which waits for the environment's setup), so the trickle must end there.
    hs = hostile_server
    hs.app.reset()
    env = OrsEnv(base_url=hs.url, env_name="echo", timeout=1.0, setup_timeout=1.5,
                 backend_options=_fast())
    try:
        env.reset(seed=0)
        for path, limit in (("/echo/task_tools", "timeout=1.0"),
                            ("/echo/prompt", "setup_timeout=1.5")):
            hs.app.plan(path, streamed(b"[", b" ", interval=0.1, max_seconds=15,
                                       content_type="application/json"))
            outcome, _ = _bounded(lambda: env.reset(seed=1))
            assert isinstance(outcome, OrsTimeoutError), outcome
            assert limit in str(outcome)
            hs.app.reset()
    finally:
        hs.app.reset()
        env.close()


def test_redirect_to_another_origin_does_not_carry_credentials(
    hostile_server: HostileServer,
) -> None:
    # A server (hostile, or with an open redirect) sends the client elsewhere:
    # the API key and the secrets must not follow to the other origin.
    from openreward.environments import Server

    from ors_gym.serving import load_environment_classes

    elsewhere = FaultyApp(Server(load_environment_classes([Echo])).app)
    hs = hostile_server
    hs.app.reset()
    with UvicornThread(elsewhere) as other:
        hs.app.plan("/create", redirect_to(other.url), times=None)
        hs.app.plan("/echo/call", redirect_to(other.url), times=None)
        env = OrsEnv(base_url=hs.url, env_name="echo", api_key=API_KEY,
                     secrets={"TOKEN": SECRET}, backend_options=_fast(max_retries=0))
        try:
            for attempt in (lambda: env.reset(seed=0), lambda: env.step(_call("echo", text="x"))):
                try:
                    attempt()
                except OrsError:
                    pass  # refusing the redirect is fine; leaking credentials is not
        finally:
            hs.app.reset()
            env.close()
    assert elsewhere.requests, "the redirect was not followed at all (nothing to check)"
    leaked = sorted({(path, name) for path, headers in elsewhere.requests
                     for name in ("x-api-key", "x-secrets") if name in headers})
    assert leaked == [], f"credentials sent to another origin: {leaked}"


# == 5. bad images ==============================================================================


@pytest.mark.parametrize("kind", list(BAD_IMAGES))
def test_bad_images_become_observation_notes(srv: ServerThread, kind: str) -> None:
    words = BAD_IMAGES[kind][2]
    env = OrsEnv(base_url=srv.url, env_name="badimages")
    try:
        obs, info = env.reset(options={"task_spec": {"kind": kind}})  # in the prompt
        assert obs["images"] == () and env.observation_space.contains(obs)
        (note,) = info["observation_notes"]
        assert note.startswith("[image 1 could not be decoded") and note in obs["text"]
        assert all(w in note for w in words), note

        def step() -> Any:
            return env.step(_call("show", kind=kind))

        result, peak = _bounded(step)
        assert not isinstance(result, BaseException), result
        obs, reward, terminated, truncated, info = result
        assert (reward, terminated, truncated) == (0.0, False, False)
        assert env.observation_space.contains(obs)
        (good,) = obs["images"]  # the good image after the broken one still decodes
        assert good.shape == (3, 4, 3) and tuple(good[0, 0]) == (200, 30, 30)
        (note,) = info["observation_notes"]
        assert note.startswith("[image 1 could not be decoded") and all(w in note for w in words)
        assert obs["text"].split("\n") == [f"showing {kind}", note]
        assert peak < 40_000_000  # the 144 MB bomb was never decoded
    finally:
        env.close()


# == 6. leaks ====================================================================================


class _Resources:
    """Open sockets and live threads now, to compare with later (closing is asynchronous)."""

    def __init__(self) -> None:
        gc.collect()
        assert _cleanup.flush()
        self.sockets = open_sockets()
        self.threads = set(threading.enumerate())

    def new_threads(self, *, live_pools: bool = False) -> list[str]:
        """Threads started since; with ``live_pools``, not counting executor workers.

        A long-lived event loop (a server's, a shared backend's) grows its default
        executor up to ``min(32, cpus + 4)`` workers when calls overlap: bounded,
        not a leak, so such tests only check that bound.
        """
        names = sorted(t.name for t in threading.enumerate() if t not in self.threads)
        if live_pools:
            workers = [n for n in names if n.startswith("asyncio_")]
            assert len(workers) <= 32, workers
            names = [n for n in names if n not in workers]
        return names

    def assert_settled(self, socket_slack: int = 0, *, live_pools: bool = False) -> None:
        """No more sockets than before (plus ``socket_slack``), no thread started since."""
        gc.collect()
        assert _cleanup.flush()
        wait_for(lambda: open_sockets() <= self.sockets + socket_slack, 20,
                 f"open sockets back to {self.sockets} (now {open_sockets()})")
        wait_for(lambda: not self.new_threads(live_pools=live_pools), 20,
                 f"no new threads (still running: {self.new_threads(live_pools=live_pools)})")


INC = _call("increment")


def test_thousand_in_process_reset_close_cycles_leak_nothing() -> None:
    shared = LocalBackend(Counter)

    def cycle(i: int) -> None:
        env = OrsEnv(backend=shared, env_name="counter")
        env.reset(seed=i)
        env.step(INC)
        env.close()

    try:
        for i in range(20):  # warm: the backend's loop and its executor threads exist
            cycle(i)
        before = _Resources()
        for i in range(1_000):
            cycle(i)
            assert shared.open_sessions == frozenset()
        before.assert_settled(live_pools=True)
    finally:
        shared.close()


def test_owned_in_process_backends_are_released_by_close() -> None:
    # each OrsEnv(env_class=...) owns a backend with its own event loop (a
    # selector and a socket pair) and executor threads: close() must free them
    def cycle(i: int) -> None:
        env = OrsEnv(env_class=Counter)
        env.reset(seed=i)
        env.step(INC)
        env.close()
        assert cast(LocalBackend, env.backend).open_sessions == frozenset()

    cycle(0)
    before = _Resources()
    for i in range(30):  # a resource kept per cycle shows after any number of cycles
        cycle(i)
    before.assert_settled()


def test_thousand_abandoned_in_process_envs_are_cleaned_up() -> None:
    shared = LocalBackend(Counter)

    def abandon(i: int) -> None:
        env = OrsEnv(backend=shared, env_name="counter")
        env.reset(seed=i)
        env.step(INC)
        # no close(): the env is dropped with its session open

    try:
        for i in range(20):
            abandon(i)
        before = _Resources()
        for i in range(1_000):
            abandon(i)
        gc.collect()
        assert _cleanup.flush()
        assert shared.open_sessions == frozenset()
        before.assert_settled(live_pools=True)
    finally:
        shared.close()


def test_abandoned_owned_in_process_backends_are_released() -> None:
    backends: list[Any] = []

    def abandon(i: int) -> None:
        env = OrsEnv(env_class=Counter)
        env.reset(seed=i)
        backends.append(env.backend)

    abandon(0)
    before = _Resources()
    for i in range(30):  # a resource kept per env shows after any number of envs
        abandon(i)
    gc.collect()
    assert _cleanup.flush()
    assert all(b.open_sessions == frozenset() for b in backends)
    before.assert_settled()


def test_http_reset_close_cycles_leak_nothing(srv: ServerThread) -> None:
    before_sessions = set(srv.sdk_server._active_envs)
    shared = OrsEnv(base_url=srv.url, env_name="counter")

    def fresh_env(i: int) -> None:
        env = OrsEnv(base_url=srv.url, env_name="counter")
        env.reset(seed=i)
        env.step(INC)
        env.close()

    try:
        fresh_env(0)
        shared.reset(seed=0)
        before = _Resources()
        for i in range(50):
            shared.reset(seed=i)
            shared.step(INC)
            assert len(set(srv.sdk_server._active_envs) - before_sessions) == 1
        for i in range(10):  # each makes (and must release) its own client and keepalive thread
            fresh_env(i)
    finally:
        shared.close()
    assert set(srv.sdk_server._active_envs) == before_sessions
    before.assert_settled(socket_slack=1, live_pools=True)  # the server's loop lives on


def test_http_abandoned_envs_are_cleaned_up(srv: ServerThread) -> None:
    before_sessions = set(srv.sdk_server._active_envs)

    def abandon(i: int) -> None:
        env = OrsEnv(base_url=srv.url, env_name="counter")
        env.reset(seed=i)

    abandon(0)
    before = _Resources()
    assert set(srv.sdk_server._active_envs) == before_sessions
    for i in range(10):
        abandon(i)
    gc.collect()
    assert _cleanup.flush()
    assert set(srv.sdk_server._active_envs) == before_sessions
    before.assert_settled(live_pools=True)


# == 7. secrets ==================================================================================

API_KEY = "sk-reliab-KEY-8d1f0c3e"
SECRET = "hunter2-reliab-SECRET-77aa"


def _secret_forms() -> list[str]:
    header = secrets_header({"TOKEN": SECRET})
    return [API_KEY, SECRET, header, _b64(API_KEY.encode()), _b64(SECRET.encode())]


def _shown(obj: Any) -> str:
    parts = [repr(obj), str(obj)]
    if isinstance(obj, BaseException):
        parts += [repr(obj.args), repr(vars(obj))]
    return "\n".join(parts)


def test_secrets_never_leak(srv: ServerThread, tmp_path: Path,
                            caplog: pytest.LogCaptureFixture) -> None:
    for name in (None, "ors_gym", "ors_gym.http", "httpx", "httpcore", "openreward"):
        caplog.set_level(logging.DEBUG, logger=name)
    creds: dict[str, Any] = {"api_key": API_KEY, "secrets": {"TOKEN": SECRET}}
    shown: list[str] = []
    errors: list[OrsError] = []

    def provoke(fn: Callable[[], Any]) -> None:
        try:
            fn()
        except OrsError as exc:
            errors.append(exc)
        else:
            raise AssertionError("expected an OrsError")

    path = tmp_path / "runs.jsonl"
    env = RecordTrajectories(OrsEnv(base_url=srv.url, env_name="probe", **creds), path)
    echo = OrsEnv(base_url=srv.url, env_name="echo", **creds)
    GATE.clear()
    try:
        obs, info = env.reset(seed=0)
        shown += [json.dumps(info, default=repr), obs["text"]]
        obs, _, _, _, info = env.step(_call("secret_digest", name="TOKEN"))
        assert obs["text"] == digest(SECRET)  # the secret did reach the environment
        shown += [json.dumps(info, default=repr), _shown(env), _shown(env.unwrapped),
                  _shown(cast(OrsEnv, env.unwrapped).backend), repr(env.unwrapped.spec)]
        env.step(_call("secret_digest", name="nope"))
        env.close()  # writes the unfinished episode

        provoke(lambda: OrsEnv(base_url=srv.url, env_name="nosuch", **creds).reset())
        echo.reset(seed=0)
        provoke(lambda: echo.step(_call("fail", message="kaboom")))
        slow = OrsEnv(base_url=srv.url, env_name="probe", backend_options={"call_timeout": 0.3},
                      **creds)
        slow.reset(seed=0)
        provoke(lambda: slow.step(_call("wait_gate")))
        GATE.set()
        slow.close()
        with FlakyProxy(srv.url) as proxy:
            dead = OrsEnv(base_url=proxy.url, env_name="echo", on_error="truncate",
                          backend_options=_fast(max_retries=0), **creds)
            dead.reset(seed=0)
            proxy.stop()
            *_, info = dead.step(_call("echo", text="x"))
            shown.append(json.dumps(info, default=repr))
            provoke(lambda: dead.reset(seed=1))
            dead.close()
    finally:
        GATE.set()
        env.close()
        echo.close()
    kinds = {type(e) for e in errors}
    assert {OrsRequestError, OrsToolError, OrsTimeoutError, OrsConnectionError} <= kinds
    shown += [_shown(e) for e in errors]
    shown.append(path.read_text())
    assert [e["steps"][0]["observation"] for e in read_trajectories(path)] == [digest(SECRET)]
    logged = [caplog.text] + [r.getMessage() for r in caplog.records]
    logged += [repr(r.args) for r in caplog.records]
    assert any("/probe/call" in line for line in logged)  # DEBUG request logs were captured
    for text in shown + logged:
        for secret in _secret_forms():
            assert secret not in text


# == 8. fuzzing the action parser through step ==================================================

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)
_names = st.sampled_from(["submit", "add", "multiply", "negate", "nosuch", "", "SUBMIT"]) | \
    st.text(max_size=12)
_arguments = _json | st.fixed_dictionaries({}, optional={
    "answer": _json, "a": _json, "b": _json, "x": _json})
_call_dict = st.one_of(
    st.fixed_dictionaries({"name": _names, "arguments": _arguments}),
    st.fixed_dictionaries({"name": _names, "input": _arguments}),
    st.fixed_dictionaries({"type": st.just("function"), "id": st.text(max_size=6),
                           "function": st.fixed_dictionaries(
                               {"name": _names, "arguments": _arguments | _arguments.map(
                                   lambda a: json.dumps(a))})}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": st.text(max_size=6),
                           "name": _names, "input": _arguments}),
)
_actions = st.one_of(
    st.text(max_size=300),
    _call_dict.map(lambda c: json.dumps(c)),
    st.tuples(st.text(max_size=40), _call_dict).map(
        lambda t: f"{t[0]}<tool_call>{json.dumps(t[1])}</tool_call>"),
    st.tuples(st.text(max_size=40), _call_dict).map(
        lambda t: f"{t[0]}\n```json\n{json.dumps(t[1])}\n```"),
    st.fixed_dictionaries({}, optional={"tool_calls": st.lists(_call_dict, max_size=3) | _json,
                                        "message": st.text(max_size=40) | _json}),
    _call_dict,
    st.lists(_call_dict, max_size=3),
    st.dictionaries(st.text(max_size=10), _json, max_size=4),
    _json,
)


@pytest.mark.parametrize("env_class", [Math, Toolbox], ids=["Math", "Toolbox"])
def test_fuzzed_actions_only_raise_action_errors(env_class: type) -> None:
    env = OrsEnv(env_class=env_class)
    env.reset(seed=0)
    outcomes: dict[str, int] = {"ok": 0, "action_error": 0}

    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_actions)
    def check(action: Any) -> None:
        try:
            result = env.step(action)
        except OrsActionError as exc:
            assert str(exc)
            outcomes["action_error"] += 1
            return
        assert isinstance(result, tuple) and len(result) == 5
        obs, reward, terminated, truncated, info = result
        assert env.observation_space.contains(obs), obs
        assert isinstance(reward, (int, float, np.floating)) and math.isfinite(float(reward))
        assert isinstance(terminated, bool) and isinstance(truncated, bool)
        assert isinstance(info, dict) and isinstance(info["calls"], list)
        outcomes["ok"] += 1
        if terminated or truncated:
            env.reset()

    try:
        check()
    finally:
        env.close()
    assert outcomes["ok"] > 0 and outcomes["action_error"] > 0  # both paths were exercised
