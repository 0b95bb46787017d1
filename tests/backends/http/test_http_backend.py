"""HttpBackend against the real SDK server (and real misbehaving servers for faults).

conftest.py quiets the SDK (no update check, WARNING logs) before it is imported.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import pickle
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from openreward.environments import RunToolOutput as SdkRunToolOutput
from openreward.environments import RunToolSuccess as SdkRunToolSuccess
from openreward.environments import Server
from PIL import Image

from ors_gym.backends import Backend
from ors_gym.backends.http import HttpBackend, pooled_transport
from ors_gym.envs._common import text_output
from ors_gym.envs.counter import Counter
from ors_gym.envs.qa import QA
from ors_gym.envs.testing.echo import Echo
from ors_gym.envs.toolbox import Toolbox
from ors_gym.errors import (
    OrsConnectionError,
    OrsError,
    OrsProtocolError,
    OrsRequestError,
    OrsServerError,
    OrsSessionExpired,
    OrsTimeoutError,
    OrsToolError,
)
from ors_gym.protocol import (
    ImageBlock,
    Message,
    RunToolError,
    RunToolSuccess,
    Split,
    TextBlock,
)
from ors_gym.serving import ServerThread, load_environment_classes
from tests._fault_servers import (
    CuttingProxy,
    FastReaper,
    Fault,
    FaultyApp,
    UvicornThread,
    json_body,
    wait_for,
)
from tests._test_envs import GATE, Probe, digest

pytestmark = pytest.mark.timeout(60)

ENVS: list[type] = [Echo, QA, Counter, Toolbox, Probe]
STARTING = {"X-Backend-State": "starting", "Retry-After": "0"}


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    with ServerThread(ENVS) as server:
        yield server


@pytest.fixture
def backend(srv: ServerThread) -> Iterator[HttpBackend]:
    b = HttpBackend(srv.url, max_retries=2, backoff=0.01)
    yield b
    b.close()


@pytest.fixture(scope="module")
def faulty_server() -> Iterator[tuple[FaultyApp, str]]:
    app = FaultyApp(Server(load_environment_classes([Echo, Probe])).app)
    with UvicornThread(app) as thread:
        yield app, thread.url


@pytest.fixture
def faulty(faulty_server: tuple[FaultyApp, str]) -> Iterator[tuple[FaultyApp, str]]:
    app, url = faulty_server
    app.reset()
    yield app, url
    app.release()  # free any stalled request before the next test


def _text(result: Any) -> str:
    assert isinstance(result, RunToolSuccess), result
    block = result.output.blocks[0]
    assert isinstance(block, TextBlock)
    return block.text


def _echo_session(b: HttpBackend) -> str:
    return b.create_session("echo", split="train", index=0)


# -- discovery ----------------------------------------------------------------------------


def test_is_a_backend(backend: HttpBackend) -> None:
    assert isinstance(backend, Backend)


def test_discovery_endpoints(backend: HttpBackend) -> None:
    assert backend.health() == {"status": "ok"}
    assert "version" in backend.version()
    assert backend.list_environments() == [cls.__name__.lower() for cls in ENVS]

    qa = backend.tools("QA")  # names are case-insensitive
    assert qa.terminal_tool is not None and qa.terminal_tool.arg == "answer"
    assert [t.name for t in qa.tools] == ["hint"]
    counter = backend.tools("counter")
    assert counter.terminal_tool is not None and counter.terminal_tool.arg is None
    assert backend.tools("probe").supports_score_group is True
    assert "add" not in {t.name for t in backend.tools("toolbox").tools}  # a task tool

    assert backend.splits("qa") == [Split(name="train", type="train"),
                                    Split(name="test", type="test")]
    tasks = backend.tasks("qa", "test")
    assert tasks == list(QA.list_tasks("test"))
    assert backend.num_tasks("qa", "test") == len(tasks)
    assert backend.task("qa", "test", 1) == tasks[1]
    assert backend.task("qa", "test", -1) == tasks[-1]
    assert backend.task_range("qa", "test", -3, None) == tasks[-3:]
    assert backend.task_range("qa", "test", 2, 5) == tasks[2:5]
    assert backend.task_range("qa", "test") == tasks


def test_unknown_environment_split_index(backend: HttpBackend) -> None:
    with pytest.raises(OrsRequestError, match=r"unknown environment 'nosuch'; this server has: "
                       r"echo, qa, counter, toolbox, probe"):
        backend.tools("nosuch")
    with pytest.raises(OrsRequestError, match="unknown environment"):
        backend.create_session("nosuch", task_spec={})
    with pytest.raises(OrsRequestError, match="Invalid split") as split_err:
        backend.tasks("qa", "nosuch")
    assert split_err.value.status_code == 400
    with pytest.raises(OrsRequestError, match="Invalid index"):
        backend.task("qa", "test", 10_000)
    with pytest.raises(OrsRequestError, match="Invalid index"):
        backend.create_session("qa", split="test", index=10_000)
    with pytest.raises(ValueError, match="either task_spec"):
        backend.create_session("qa")
    with pytest.raises(ValueError, match="either task_spec"):
        backend.create_session("qa", task_spec={}, split="test", index=0)


def test_an_unknown_session_keyword_is_refused_by_name(backend: HttpBackend) -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'tool_set'; its "
                       r"keywords are task_spec, split, index, secrets, toolset"):
        backend.create_session("qa", split="test", index=0, tool_set="codex")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"arguments 'splt', 'idx'"):
        backend.create_session("qa", splt="test", idx=0)  # type: ignore[call-arg]
    assert backend.open_sessions == frozenset()  # refused before anything was opened


def test_failing_constructor_is_a_server_error(backend: HttpBackend) -> None:
    with pytest.raises(OrsServerError, match="needs 'question'") as err:
        backend.create_session("qa", task_spec={"no": "question"})
    assert err.value.status_code == 500
    assert err.value.env_name == "qa"


# -- sessions -----------------------------------------------------------------------------


def test_create_by_spec_and_by_negative_index(backend: HttpBackend) -> None:
    spec = {"question": "What colour is the sky on a clear day?", "answer": "blue"}
    sid = backend.create_session("qa", task_spec=spec)
    prompt = backend.prompt("qa", sid)
    assert isinstance(prompt[0], TextBlock) and spec["question"] in prompt[0].text

    last = backend.tasks("qa", "test")[-1]
    sid2 = backend.create_session("qa", split="test", index=-1)
    prompt2 = backend.prompt("qa", sid2)
    assert isinstance(prompt2[0], TextBlock) and last["question"] in prompt2[0].text
    assert backend.messages("qa", sid2) == [Message(role="user", blocks=list(prompt2))]
    assert {sid, sid2} <= backend.open_sessions

    result = backend.call("qa", sid2, "answer", {"answer": last["answer"]})
    assert isinstance(result, RunToolSuccess)
    assert result.output.reward == 1.0 and result.output.finished


def test_task_tools_include_the_tasks_own_tools(backend: HttpBackend) -> None:
    task = backend.task("toolbox", "train", 2)  # an add + negate task
    sid = backend.create_session("toolbox", task_spec=task)
    names = {t.name for t in backend.task_tools("toolbox", sid).tools}
    assert {"add", "negate", "submit"} <= names and "multiply" not in names
    assert _text(backend.call("toolbox", sid, "add", {"a": 2, "b": 3})) == "5"


def test_call_results_and_the_finished_latch(backend: HttpBackend) -> None:
    sid = _echo_session(backend)
    # numpy values (what Gym code hands around) are sent as plain JSON numbers
    assert _text(backend.call("echo", sid, "echo", {"text": "ab ", "repeat": np.int64(2)})) \
        == "ab ab "

    missing = backend.call("echo", sid, "nosuch", {})
    assert isinstance(missing, RunToolError) and missing.reason == "not_found"
    invalid = backend.call("echo", sid, "echo", {"repeat": "many"})
    assert isinstance(invalid, RunToolError) and invalid.reason == "input_validation"

    done = backend.call("echo", sid, "finish", {"reward": 0.25})
    assert isinstance(done, RunToolSuccess)
    assert done.output.finished and done.output.reward == 0.25
    after = backend.call("echo", sid, "echo", {"text": "x"})
    assert isinstance(after, RunToolError) and after.reason == "episode_finished"


def test_chunk_boundaries_on_spaces_are_reassembled_byte_exact(backend: HttpBackend) -> None:
    # Every 4096-character chunk of the JSON result starts with spaces: a parser
    # that strips all whitespace after "data:" (not exactly one) corrupts it.
    text = ("x" + " " * 4095) * 5 + "end"
    wire = SdkRunToolOutput(
        SdkRunToolSuccess(output=text_output(text, metadata={"length": len(text)}))
    ).model_dump_json(indent=None)
    boundaries = range(4096, len(wire), 4096)
    assert len(boundaries) >= 4 and all(wire[i : i + 2] == "  " for i in boundaries)

    sid = _echo_session(backend)
    result = backend.call("echo", sid, "echo", {"text": text})
    assert _text(result) == text
    assert isinstance(result, RunToolSuccess) and result.output.metadata == {"length": len(text)}


def test_large_unicode_result(backend: HttpBackend) -> None:
    sid = _echo_session(backend)
    piece = "héllo wörld 🎉 \\ \"quoted\"  tab\t "
    assert _text(backend.call("echo", sid, "echo", {"text": piece, "repeat": 700})) == piece * 700


def test_result_size_is_capped(srv: ServerThread) -> None:
    with HttpBackend(srv.url, max_response_bytes=10_000) as small:
        sid = _echo_session(small)
        with pytest.raises(OrsProtocolError, match="max_response_bytes=10000"):
            small.call("echo", sid, "echo", {"text": "y" * 50_000})


def test_image_blocks(backend: HttpBackend) -> None:
    sid = _echo_session(backend)
    result = backend.call("echo", sid, "image", {"width": 7, "height": 5})
    assert isinstance(result, RunToolSuccess)
    image = result.output.blocks[1]
    assert isinstance(image, ImageBlock) and image.mimeType == "image/png"
    assert Image.open(io.BytesIO(base64.b64decode(image.data))).size == (7, 5)


def test_tool_exception_is_a_tool_error(backend: HttpBackend) -> None:
    sid = _echo_session(backend)
    with pytest.raises(OrsToolError) as err:
        backend.call("echo", sid, "fail", {"message": "kaboom-4711"})
    text = str(err.value)
    assert "kaboom-4711" in text and "bug in the environment" in text
    assert err.value.tool == "fail" and err.value.session_id == sid and sid in text
    # the session survives a tool exception
    assert _text(backend.call("echo", sid, "echo", {"text": "still here"})) == "still here"


def test_delete_frees_the_session(srv: ServerThread, backend: HttpBackend) -> None:
    sid = _echo_session(backend)
    assert sid in srv.sdk_server._active_envs
    backend.delete_session(sid)
    assert sid not in srv.sdk_server._active_envs
    assert sid not in backend.open_sessions
    with pytest.raises(OrsSessionExpired, match="call reset"):
        backend.ping(sid)
    with pytest.raises(OrsSessionExpired) as err:
        backend.call("echo", sid, "echo", {"text": "x"})
    assert err.value.session_id == sid
    backend.delete_session(sid)  # idempotent


def test_score_group(backend: HttpBackend) -> None:
    sid = backend.create_session("probe", split="train", index=0)
    user = {"role": "user", "blocks": [{"type": "text", "text": "q"}]}
    reply = Message(role="assistant", blocks=[TextBlock(text="a")])  # models are sent as JSON
    candidates: list[dict[str, Any]] = [
        {"messages": [user]},
        {"messages": [user, reply], "metadata": {"k": 1}},
    ]
    scores = backend.score_group("probe", sid, candidates)
    assert [s.reward for s in scores] == [0.0, 1.0]
    assert [s.metadata for s in scores] == [{"turns": 1}, {"turns": 2}]

    echo_sid = _echo_session(backend)
    with pytest.raises(OrsRequestError, match="does not implement score_group"):
        backend.score_group("echo", echo_sid, candidates)


def test_close_deletes_open_sessions_and_is_idempotent(srv: ServerThread) -> None:
    b = HttpBackend(srv.url)
    sids = [_echo_session(b) for _ in range(2)]
    assert all(sid in srv.sdk_server._active_envs for sid in sids)
    b.close()
    assert not any(sid in srv.sdk_server._active_envs for sid in sids)
    assert b.open_sessions == frozenset()
    b.close()
    assert b.health() == {"status": "ok"}  # reconnects on next use
    b.close()


def test_connections_are_pooled(srv: ServerThread) -> None:
    with CuttingProxy(srv.url, cuts=0) as proxy, HttpBackend(proxy.url) as b:
        sid = _echo_session(b)
        for i in range(5):
            assert _text(b.call("echo", sid, "echo", {"text": str(i)})) == str(i)
            b.prompt("echo", sid)
        assert proxy.connections == 1  # streams are read to their end and their connection reused


def test_pickles_before_and_after_use(srv: ServerThread, backend: HttpBackend) -> None:
    fresh = pickle.loads(pickle.dumps(HttpBackend(srv.url, api_key="k")))
    assert fresh.health() == {"status": "ok"}
    fresh.close()

    sid = _echo_session(backend)
    copy = pickle.loads(pickle.dumps(backend))
    assert copy.open_sessions == frozenset()  # sessions stay with the original
    assert _text(copy.call("echo", sid, "echo", {"text": "from a copy"})) == "from a copy"
    copy.close()
    assert sid in srv.sdk_server._active_envs


def test_call_timeout_names_the_setting(srv: ServerThread) -> None:
    GATE.clear()
    try:
        with HttpBackend(srv.url, call_timeout=0.5) as b:
            sid = b.create_session("probe", split="train", index=0)
            with pytest.raises(OrsTimeoutError, match=r"call_timeout=0\.5") as err:
                b.call("probe", sid, "wait_gate", {})
            assert err.value.tool == "wait_gate"
    finally:
        GATE.set()


# -- resuming and not resending tool calls --------------------------------------------------


def test_dropped_stream_is_resumed_and_the_tool_runs_once(srv: ServerThread) -> None:
    token = uuid.uuid4().hex
    with CuttingProxy(srv.url, cut_response_after=b"event: task_id") as proxy, \
            HttpBackend(proxy.url, backoff=0.05) as b:
        sid = _echo_session(b)
        result = b.call("echo", sid, "slow_count", {"token": token, "seconds": 0.3})
        assert _text(result) == "1"
        assert proxy.cuts_done == 1
        assert proxy.count(b"POST /echo/call ") == 2  # the first stream, then the resume
        assert proxy.count(b'"task_id":null') == 1 and proxy.count(b'"task_id":"') == 1
        assert _text(b.call("echo", sid, "count", {"token": token})) == "1"
    assert Echo.counts[token] == 1


def test_drop_before_acknowledgement_is_not_resent(srv: ServerThread,
                                                   backend: HttpBackend) -> None:
    token = uuid.uuid4().hex
    # Every request on a new connection: the call's is no kept-alive one the server
    # closed while idle, so its drop may have come after the server read it.
    with CuttingProxy(srv.url, cut_request_on=b"POST /echo/call ") as proxy, \
            HttpBackend(proxy.url, backoff=0.01, max_keepalive_connections=0) as b:
        sid = _echo_session(b)
        with pytest.raises(OrsConnectionError, match="cannot know whether the tool ran"):
            b.call("echo", sid, "slow_count", {"token": token})
        assert proxy.count(b"POST /echo/call ") == 1
        assert _text(backend.call("echo", sid, "count", {"token": token})) == "0"


def test_a_call_on_a_connection_closed_while_idle_is_sent_again_and_runs_once(
    srv: ServerThread,
) -> None:
    token = uuid.uuid4().hex
    # The proxy closes the kept-alive connection as the call arrives, without passing
    # it on: what a server whose idle timer fired just then does.
    with CuttingProxy(srv.url, cut_request_on=b"POST /echo/call ") as proxy, \
            HttpBackend(proxy.url, max_retries=0) as b:
        sid = _echo_session(b)
        assert _text(b.call("echo", sid, "slow_count", {"token": token})) == "1"
        assert proxy.cuts_done == 1 and proxy.count(b"POST /echo/call ") == 2
        assert proxy.count(b'"task_id":"') == 0  # sent again as new: it never ran
    assert Echo.counts[token] == 1


def test_resume_of_a_call_the_server_forgot(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    # the first stream is cut after its task_id; the resume meets a server that
    # no longer knows the id (as after a restart)
    app.add(Fault("/echo/call", 200, skip=1, content_type="text/event-stream",
                  body=b"event: error\r\ndata: unknown task_id\r\n\r\n"))
    with CuttingProxy(url, cut_response_after=b"event: task_id") as proxy, \
            HttpBackend(proxy.url, backoff=0.01) as b:
        sid = _echo_session(b)
        with pytest.raises(OrsConnectionError, match="no longer knows call") as err:
            b.call("echo", sid, "slow_count", {"token": uuid.uuid4().hex, "seconds": 0.2})
        assert not isinstance(err.value, OrsToolError)
        assert proxy.count(b'"task_id":null') == 1 and proxy.count(b'"task_id":"') == 1
    assert app.hits["/echo/call"] == 2


# -- retries --------------------------------------------------------------------------------


def test_starting_503_is_ridden_out_and_the_tool_runs_once(
    faulty: tuple[FaultyApp, str],
) -> None:
    app, url = faulty
    token = uuid.uuid4().hex
    with HttpBackend(url, max_retries=1, backoff=0.01) as b:
        sid = _echo_session(b)
        app.add(Fault("/echo/call", 503, times=3, headers=STARTING))
        # three "starting" answers outlast max_retries=1: the ride-out is by time
        assert _text(b.call("echo", sid, "slow_count", {"token": token})) == "1"
        assert app.hits["/echo/call"] == 4
        assert Echo.counts[token] == 1


def test_starting_ride_out_ends(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    with HttpBackend(url, starting_ride_out=0.5) as b:
        sid = _echo_session(b)
        app.add(Fault("/echo/prompt", 503, times=1000,
                      headers={"X-Backend-State": "starting", "Retry-After": "1"}))
        with pytest.raises(OrsServerError) as err:
            b.prompt("echo", sid)
    assert err.value.status_code == 503
    assert app.hits["/echo/prompt"] >= 2


def test_gateway_errors_are_retried(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    app.add(Fault("/echo/splits", 502, times=2))
    with HttpBackend(url, max_retries=3, backoff=0.01) as b:
        assert b.splits("echo") == [Split(name="train", type="train")]
    assert app.hits["/echo/splits"] == 3


def test_retries_run_out(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    app.add(Fault("/health", 502, times=100))
    with HttpBackend(url, max_retries=2, backoff=0.01) as b, \
            pytest.raises(OrsServerError) as err:
        b.health()
    assert err.value.status_code == 502
    assert app.hits["/health"] == 3


def test_429s_run_out_in_time_without_progress(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    app.add(Fault("/health", 429, times=1000))
    with HttpBackend(url, max_retries=0, backoff=0.01, rate_limit_timeout=0.3) as b, \
            pytest.raises(OrsRequestError) as err:
        b.health()
    assert err.value.status_code == 429
    assert app.hits["/health"] > 1  # max_retries=0 did not stop it: 429s spend none
    assert "gave up after rate_limit_timeout=0.3 s without progress" in str(err.value)
    assert "HttpBackend(rate_limit_timeout=...)" in str(err.value)


def test_500_is_never_retried(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    app.add(Fault("/echo/tools", 500, times=5, body=json_body("boom in tools")))
    with HttpBackend(url, max_retries=5, backoff=0.01) as b, \
            pytest.raises(OrsServerError, match="boom in tools") as err:
        b.tools("echo")
    assert err.value.status_code == 500
    assert app.hits["/echo/tools"] == 1


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_a_gateway_answer_before_the_call_started_is_resent_and_the_tool_runs_once(
    faulty: tuple[FaultyApp, str], status: int,
) -> None:
    app, url = faulty
    token = uuid.uuid4().hex
    page = b"<html><head><title>Gateway</title></head><body>down</body></html>"
    with HttpBackend(url, max_retries=5, backoff=0.01) as b:
        sid = _echo_session(b)
        app.add(Fault("/echo/call", status, times=2, body=page, content_type="text/html"))
        result = b.call("echo", sid, "slow_count", {"token": token})
        assert result.ok and app.hits["/echo/call"] == 3
        assert Echo.counts[token] == 1
        app.add(Fault("/echo/call", status, times=10, body=page, content_type="text/html"))
        with HttpBackend(url, max_retries=1, backoff=0.01, rate_limit_timeout=0.2) as spent, \
                pytest.raises(OrsServerError if status != 429 else OrsRequestError) as err:
            spent.call("echo", sid, "slow_count", {"token": token})
        ran_out = "rate_limit_timeout=0.2 s" if status == 429 else "gave up after 2 tries"
        assert err.value.status_code == status and ran_out in str(err.value)
        assert Echo.counts[token] == 1  # the budget ran out; the tool never ran again


def test_messages_falls_back_to_prompt_once(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    app.add(Fault("/echo/messages", 404, times=100, body=json_body("Not Found")))
    with HttpBackend(url) as b:
        sid = _echo_session(b)
        first = b.messages("echo", sid)
        assert first == [Message(role="user", blocks=list(b.prompt("echo", sid)))]
        assert b.messages("echo", sid) == first
    assert app.hits["/echo/messages"] == 1  # the server's lack of /messages is remembered


def test_a_reset_asking_messages_asks_the_prompt_once_on_a_server_without_them(
    faulty: tuple[FaultyApp, str],
) -> None:
    """What a token episode's reset asks: the prompt and its messages in one round trip;
    once the server is known to lack /messages, the prompt already asked is them."""
    from ors_gym import OrsEnv

    app, url = faulty
    app.add(Fault("/echo/messages", 404, times=100, body=json_body("Not Found")))
    with OrsEnv(url, env_name="echo") as env:
        env.prefetch_messages = True
        env.reset(seed=0)
        asked = app.hits["/echo/prompt"]  # the first: the prompt, and again behind the 404
        env.reset(seed=0)
        assert app.hits["/echo/prompt"] == asked + 1 and app.hits["/echo/messages"] == 1
        (message,) = env.messages()  # known from the reset: nothing more is asked
        assert message.role == "user" and app.hits["/echo/prompt"] == asked + 1


def test_answers_that_are_not_ors(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    app.add(Fault("/health", 200, body=b"<html>hi</html>", content_type="text/html"))
    with HttpBackend(url) as b:
        with pytest.raises(OrsProtocolError, match="expected a JSON answer"):
            b.health()
        sid = _echo_session(b)
        app.add(Fault("/echo/call", 200, body=b'{"ok": true}'))
        with pytest.raises(OrsProtocolError, match="text/event-stream"):
            b.call("echo", sid, "echo", {"text": "x"})


def test_read_timeout_names_the_setting(faulty: tuple[FaultyApp, str]) -> None:
    app, url = faulty
    app.add(Fault("/health", stall=True))
    with HttpBackend(url, timeout=0.3) as b, \
            pytest.raises(OrsTimeoutError, match=r"timeout=0\.3.*HttpBackend\(timeout=") as err:
        b.health()
    assert err.value.server == url


def test_dead_server_is_a_connection_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"  # nothing listens there any more
    with HttpBackend(url, max_retries=1, backoff=0.01) as b, \
            pytest.raises(OrsConnectionError, match="cannot reach the ORS server") as err:
        b.health()
    assert "ors-gym serve" in str(err.value)
    assert not isinstance(err.value, OrsTimeoutError)


def test_refused_connection_fails_at_once() -> None:
    # With the default retries, a refused connection is not retried: it fails at once.
    from ors_gym import OrsEnv
    from ors_gym.backends.http import AsyncHttpBackend

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env = OrsEnv(base_url=url, env_name="echo", backend_options={"max_retries": 5})
        started = time.monotonic()
        with pytest.raises(OrsConnectionError, match="cannot reach the ORS server"):
            env.reset(seed=0)
        assert time.monotonic() - started < 2.0
        env.close()

        async def reset_async() -> None:
            async with AsyncHttpBackend(url) as backend:
                await backend.create_session("echo", split="train", index=0)

        started = time.monotonic()
        with pytest.raises(OrsConnectionError, match="cannot reach the ORS server"):
            asyncio.run(reset_async())
        assert time.monotonic() - started < 2.0


# -- secrets --------------------------------------------------------------------------------


def test_secrets_travel_in_headers_only_and_never_leak(
    faulty: tuple[FaultyApp, str], caplog: pytest.LogCaptureFixture
) -> None:
    app, url = faulty
    api_key, secret, password = "sk-test-KEY-31337", "hunter2-SECRET-value", "pw-SECRET-42"
    caplog.set_level(logging.DEBUG)
    userinfo_url = url.replace("http://", f"http://alice:{password}@")
    errors: list[OrsError] = []
    with HttpBackend(userinfo_url, api_key=api_key, max_retries=0) as b:
        sid = b.create_session("probe", split="train", index=0, secrets={"TOKEN": secret})
        result = b.call("probe", sid, "secret_digest", {"name": "TOKEN"})
        assert _text(result) == digest(secret)
        for bad in (
            lambda: b.tools("nosuch"),
            lambda: b.call("probe", sid, "fail_nope", {}),
            lambda: b.call("echo", "no-such-session", "echo", {"text": "x"}),
        ):
            try:
                bad()
            except OrsError as exc:
                errors.append(exc)
        shown = [repr(b), str(b.location), b.base_url, *map(str, errors),
                 *(repr(vars(e)) for e in errors)]
    assert len(errors) == 2  # unknown env, expired session (the unknown tool is an agent error)

    creates = [h for path, h in app.requests if path == "/create"]
    assert len(creates) == 1
    sent = json.loads(base64.b64decode(creates[0]["x-secrets"]))
    assert sent == {"TOKEN": {"value": secret}}
    assert all(h.get("x-api-key") == api_key for _, h in app.requests)
    assert all("x-secrets" not in h for path, h in app.requests if path != "/create")

    for text in (*shown, caplog.text):
        for value in (api_key, secret, password):
            assert value not in text
    assert "/probe/call" in caplog.text  # requests were logged at DEBUG


# -- keepalive -------------------------------------------------------------------------------


def test_keepalive_outlives_the_reaper() -> None:
    idle = 1.0
    with ServerThread([Echo]) as server, FastReaper(server, idle=idle) as reaper, \
            HttpBackend(server.url, keepalive_interval=0.2) as kept, \
            HttpBackend(server.url, keepalive_interval=None) as idler:
        alive = _echo_session(kept)
        dropped = _echo_session(idler)
        start = time.monotonic()
        wait_for(lambda: dropped in reaper.reaped and reaper.last_sweep - start > 3 * idle,
                 timeout=20, what="three reap windows")
        assert alive not in reaper.reaped
        assert alive in server.sdk_server._active_envs
        assert _text(kept.call("echo", alive, "echo", {"text": "alive"})) == "alive"
        with pytest.raises(OrsSessionExpired):
            idler.call("echo", dropped, "echo", {"text": "x"})

        # a kept session deleted behind the backend's back leaves the keepalive set
        idler.delete_session(alive)
        wait_for(lambda: alive not in kept.open_sessions, timeout=10,
                 what="the keepalive thread to drop the gone session")


def _child_round_trip(backend: HttpBackend, results: Any) -> None:
    """In a forked child: the parent's sessions are not ours; our own work and close do."""
    try:
        assert backend.open_sessions == frozenset()
        sid = _echo_session(backend)
        text = _text(backend.call("echo", sid, "echo", {"text": "child"}))
        backend.close()
        results.put(text)
    except BaseException as exc:  # reported to the parent, which asserts
        results.put(repr(exc))


def test_a_forked_child_uses_and_closes_its_own_copy(srv: ServerThread) -> None:
    import multiprocessing

    backend = HttpBackend(srv.url, keepalive_interval=30.0)
    sid = _echo_session(backend)  # the parent's loop, connection and keepalive task are live
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_child_round_trip, args=(backend, results))
    child.start()
    try:
        assert results.get(timeout=60) == "child"
    finally:
        child.join(60)
    assert child.exitcode == 0
    assert backend.open_sessions == {sid}  # the parent's session was left to the parent
    assert _text(backend.call("echo", sid, "echo", {"text": "parent"})) == "parent"
    backend.close()


@pytest.mark.parametrize("make", [lambda: httpx.AsyncHTTPTransport(), lambda: pooled_transport()],
                         ids=["httpx", "pooled_transport"])
def test_any_httpx_transport_carries_the_backend_and_stays_its_owners(
    srv: ServerThread, make: Callable[[], httpx.AsyncBaseTransport]
) -> None:
    from ors_gym.backends.http import AsyncHttpBackend

    async def main() -> None:
        transport = make()
        async with AsyncHttpBackend(srv.url, transport=transport) as backend:
            sid = await backend.create_session("echo", split="train", index=0)
            result = await backend.call("echo", sid, "echo", {"text": "via"})
            assert "via" in str(result)
        # The backend closed its sessions, not the shared transport: it still sends.
        async with AsyncHttpBackend(srv.url, transport=transport) as again:
            assert (await again.health())["status"] == "ok"
        await transport.aclose()

    asyncio.run(main())


def test_both_faces_take_one_options_object_and_probe(srv: ServerThread) -> None:
    from ors_gym.backends.http import AsyncHttpBackend, HttpOptions

    options = HttpOptions(call_timeout=9.0, max_retries=1)
    with HttpBackend(srv.url, options=options, backoff=0.01) as face:
        assert face.options == options.replace(backoff=0.01)
        face.probe()
    assert AsyncHttpBackend(srv.url, options=options).options is options
    with pytest.raises(TypeError, match="did you mean 'call_timeout'"):
        HttpBackend(srv.url, call_timout=1)
    with pytest.raises(ValueError, match="call_timeout must be a positive number"):
        HttpBackend(srv.url, call_timeout=0)


def test_a_tool_call_crosses_twelve_modules_three_of_them_the_transport(
    srv: ServerThread,
) -> None:
    """The modules of ``backends/http`` whose code runs during one warm tool call (traced in
    this thread; a dataclass's generated ``__init__`` counts for its class's module): a
    reader follows a call through at most twelve, three of them the transport."""
    import os
    import sys
    from types import FrameType

    from ors_gym.backends import http
    from ors_gym.backends.http import AsyncHttpBackend

    package = os.path.dirname(http.__file__) + os.sep
    ran: set[str] = set()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        path = frame.f_code.co_filename
        if path == "<string>":  # a dataclass's generated method
            owner = sys.modules.get(type(frame.f_locals.get("self")).__module__)
            path = getattr(owner, "__file__", None) or ""
        if path.startswith(package):
            ran.add(os.path.relpath(path, package))

    async def main() -> None:
        async with AsyncHttpBackend(srv.url) as backend:
            sid = await backend.create_session("echo", split="train", index=0)
            await backend.call("echo", sid, "echo", {"text": "warm"})
            sys.setprofile(profile)
            try:
                result = await backend.call("echo", sid, "echo", {"text": "traced"})
            finally:
                sys.setprofile(None)
            assert "traced" in str(result)

    asyncio.run(main())
    transport = {m for m in ran if m.startswith("transport" + os.sep)}
    assert {"async_.py", "_ops.py", "_calls.py", "transport/_pool.py".replace("/", os.sep)} <= ran
    assert len(ran) <= 12 and len(transport) <= 3, sorted(ran)
