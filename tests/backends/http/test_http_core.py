"""The sans-IO HTTP core, fed bytes and answers with no server (as h11 is tested).

Operations are generators of steps: each test sends them the answers a server
would give and checks what they ask for next (another request, a sleep, a
resumed stream) or what they raise. SSE answers are fed as the raw pieces a
driver would read from the socket (to ``StreamAssembler.read``, on a loop of
their own). Time comes from a ``Clock`` the test moves by hand.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import uuid
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import pytest

from ors_gym.backends.http._codec import BodyDecoder, status_error
from ors_gym.backends.http._ops import Ops
from ors_gym.backends.http._retry import (
    MAX_DELAY,
    RateGate,
    RetryBudget,
    RetryHint,
    parse_retry_after,
    retry_hint,
)
from ors_gym.backends.http._settings import Settings, Where
from ors_gym.backends.http._sse import StreamAssembler
from ors_gym.backends.http._steps import (
    Answer,
    Effect,
    Failure,
    Fetch,
    Op,
    Reply,
    Sleep,
    Stream,
    Streamed,
)
from ors_gym.errors import (
    OrsAuthError,
    OrsConnectionError,
    OrsError,
    OrsProtocolError,
    OrsRequestError,
    OrsServerError,
    OrsSessionExpired,
    OrsTimeoutError,
    OrsToolError,
    error_for_status,
)
from ors_gym.protocol import RunToolSuccess

URL = "http://ors.test:8080"
SID = "5b0c9b9e-session"
WHERE = Where(server=URL)
ACK = b"event: task_id\r\ndata: 0123abcd\r\n\r\n"
RESULT = {"ok": True, "output": {"blocks": [{"type": "text", "text": "hi"}]}}


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _ops(clock: Clock | None = None, **settings: Any) -> Ops:
    ops = Ops(Settings(location=URL, api_key="sk-SECRET", **settings), clock or Clock())
    ops.env_names = ["echo"]  # as if /list_environments had been asked
    # its own gate: the process's gate for URL outlives the test's clock
    ops.exchange.gate = RateGate(URL)
    return ops


def _budget(**settings: Any) -> RetryBudget:
    return RetryBudget(Settings(location=URL, **settings), RateGate(URL), 0.0)


def _json(status: int, payload: Any, **headers: str) -> Answer:
    return Answer(status, {"content-type": "application/json", **headers},
                  json.dumps(payload).encode())


def _perform(step: Stream, pieces: Iterable[bytes], encoding: str = "") -> Streamed:
    """Do what a driver does with a 200 SSE answer arriving as ``pieces``."""
    _fed(step.sink, pieces, encoding)
    return Streamed()


def _fed(sink: StreamAssembler, pieces: Iterable[bytes], encoding: str = "") -> int:
    """Let ``sink`` read ``pieces`` (which may never end) until it is done and has drained
    them, or raises; how many bytes it took."""
    taken = 0

    async def arriving() -> AsyncIterator[bytes]:
        nonlocal taken
        for raw in pieces:
            taken += len(raw)
            yield raw

    asyncio.run(sink.read(arriving(), encoding))
    return taken


class _Events(StreamAssembler):
    """Keeps every event it is fed and never completes: what the parser makes of a wire."""

    def __init__(self) -> None:
        super().__init__(max_bytes=10**7, what="call", where=WHERE)
        self.events: list[tuple[str, str]] = []

    def feed(self, event: str, data: str) -> bool:
        self.events.append((event, data))
        return False


def _events(pieces: Iterable[bytes], encoding: str = "") -> list[tuple[str, str]]:
    sink = _Events()
    _fed(sink, pieces, encoding)
    return sink.events


def _send(op: Op[Any], reply: Reply) -> Effect:
    step = op.send(reply)
    assert isinstance(step, Fetch | Stream | Sleep)
    return step


def _finish(op: Op[Any], reply: Reply) -> Any:
    with pytest.raises(StopIteration) as done:
        op.send(reply)
    return done.value.value


# -- retries and Retry-After ---------------------------------------------------------------


def test_retry_decisions() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_hint(500, {}) is None
    assert retry_hint(404, {}) is None
    starting = retry_hint(503, {"x-backend-state": "starting", "retry-after": "2"})
    assert starting == RetryHint(retry_after=2.0, starting=True)

    plain = _budget(max_retries=2, backoff=0.5, starting_ride_out=10)
    assert [plain.next_delay(None, 0.0) for _ in range(3)] == [0.5, 1.0, None]

    ride = _budget(max_retries=1, backoff=0.5, starting_ride_out=10)
    assert [ride.next_delay(starting, now) for now in (0.0, 5.0, 9.0, 10.0)] == \
        [2.0, 2.0, 1.0, None]
    # riding out "starting" spent none of max_retries
    assert [ride.next_delay(None, 10.0) for _ in range(2)] == [0.5, None]

    capped = _budget(max_retries=1, backoff=0.5, starting_ride_out=10)
    assert capped.next_delay(RetryHint(retry_after=3600.0), 0.0) == MAX_DELAY


def test_request_retries_gateway_answers_honouring_retry_after() -> None:
    op = _ops(max_retries=2, backoff=0.5).health()
    first = _send(op, None)
    assert isinstance(first, Fetch) and first.path == "/health"
    assert first.headers["X-API-Key"] == "sk-SECRET"
    assert _send(op, _json(503, {"detail": "busy"}, **{"retry-after": "7"})) == Sleep(7.0)
    assert isinstance(_send(op, None), Fetch)
    assert _send(op, _json(502, "bad gateway")) == Sleep(1.0)  # backoff, doubled
    assert isinstance(_send(op, None), Fetch)
    assert _finish(op, _json(200, {"status": "ok"})) == {"status": "ok"}


def test_request_gives_up_when_retries_run_out() -> None:
    op = _ops(max_retries=1, backoff=0.5).health()
    _send(op, None)
    assert _send(op, _json(502, {"detail": "bad gateway"})) == Sleep(0.5)
    _send(op, None)
    with pytest.raises(OrsServerError, match=r"\(502\): bad gateway") as err:
        op.send(_json(502, {"detail": "bad gateway"}))
    assert err.value.status_code == 502
    assert "gave up after 2 tries" in str(err.value) and "max_retries=1" in str(err.value)


def test_429s_spend_no_retries_and_progress_is_shared_by_the_process() -> None:
    clock = Clock()
    gate = RateGate(URL)
    first, second = _ops(clock, max_retries=0, rate_limit_timeout=3.0), _ops(clock)
    first.exchange.gate = second.exchange.gate = gate  # two envs of one process, one key
    op = first.health()
    _send(op, None)
    limited = _json(429, {"detail": "slow down"}, **{"retry-after": "2"})
    assert _send(op, limited) == Sleep(2.0)  # max_retries=0, yet retried as asked
    clock.now = 2.0
    _send(op, None)
    assert _send(op, limited) == Sleep(2.0)
    other = second.health()
    _send(other, None)
    clock.now = 3.5
    assert _finish(other, _json(200, {"status": "ok"})) == {"status": "ok"}
    clock.now = 4.0
    _send(op, None)
    assert _send(op, limited) == Sleep(2.0)  # 4 s > rate_limit_timeout=3 s, but the
    clock.now = 6.0                          # process got through at 3.5 s
    _send(op, None)
    assert _finish(op, _json(200, {"status": "ok"})) == {"status": "ok"}


def test_429s_give_up_after_rate_limit_timeout_without_progress() -> None:
    clock = Clock()
    op = _ops(clock, rate_limit_timeout=5.0, set_as="env").health()
    _send(op, None)
    limited = _json(429, {"detail": "slow down"}, **{"retry-after": "2"})
    for now in (0.0, 2.0, 4.0):
        clock.now = now
        assert _send(op, limited) == Sleep(2.0)
        clock.now = now + 2.0
        _send(op, None)
    with pytest.raises(OrsRequestError) as err:
        op.send(limited)  # 6 s without progress
    text = str(err.value)
    assert "(429): slow down" in text and "got through for 6.0 s" in text
    assert "met 429 4 times" in text and "asks to wait 2 s more" in text
    assert "rate_limit_timeout=5 s" in text and "gym.make(..., rate_limit_timeout=...)" in text


def test_a_500_is_never_retried() -> None:
    op = _ops().health()
    _send(op, None)
    with pytest.raises(OrsServerError, match=r"\(500\): boom; this is a bug") as err:
        op.send(_json(500, {"detail": "boom"}))
    assert err.value.status_code == 500


def test_starting_server_is_ridden_out_without_spending_retries() -> None:
    clock = Clock()
    op = _ops(clock, max_retries=0, starting_ride_out=5.0).health()
    _send(op, None)
    starting = _json(503, {"detail": "starting"}, **{"x-backend-state": "starting"})
    for _ in range(2):
        assert _send(op, starting) == Sleep(2.0)  # STARTING_POLL: no Retry-After given
        clock.now += 2.0
        _send(op, None)
    assert _send(op, starting) == Sleep(1.0)  # what is left of the 5 s ride-out
    clock.now += 1.0
    _send(op, None)
    with pytest.raises(OrsServerError, match="still starting; retries ran out"):
        op.send(starting)


def test_refused_connection_fails_at_once_but_a_dropped_one_is_retried() -> None:
    refused = Failure("refused", "ConnectError", "[Errno 111] Connection refused")
    op = _ops(max_retries=5).health()
    _send(op, None)
    with pytest.raises(OrsConnectionError, match="cannot reach the ORS server") as err:
        op.send(refused)  # nothing listens: no Sleep, the error comes at once
    assert not isinstance(err.value, OrsTimeoutError)

    op = _ops(max_retries=5, backoff=0.25).health()
    _send(op, None)
    assert _send(op, Failure("broken", "RemoteProtocolError", "disconnected")) == Sleep(0.25)
    assert isinstance(_send(op, None), Fetch)
    assert _send(op, Failure("connect_timeout", "ConnectTimeout", "")) == Sleep(0.5)


def test_a_read_timeout_is_not_retried() -> None:
    op = _ops(timeout=3.0).health()
    _send(op, None)
    with pytest.raises(OrsTimeoutError, match=r"within timeout=3\.0 s \(ReadTimeout\)"):
        op.send(Failure("read_timeout", "ReadTimeout", ""))


def test_a_trickling_answer_meets_the_total_time() -> None:
    clock = Clock()
    op = _ops(clock, timeout=2.0).health()
    fetch = _send(op, None)
    assert isinstance(fetch, Fetch)
    reader = fetch.reader("")
    reader.feed(b"{")
    clock.now = 2.5
    with pytest.raises(OrsTimeoutError, match=r"still arriving after timeout=2\.0 s"):
        reader.feed(b" ")


# -- statuses as errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "session", "detail", "cls", "pattern"),
    [
        (401, False, "bad key", OrsAuthError,
         r"refused \(401: bad key\): the API key .*OPENREWARD_API_KEY"),
        (422, True, "index", OrsRequestError, r"refused \(422\): index"),
        (404, False, "Not Found", OrsRequestError, r"refused \(404\): Not Found"),
        (404, True, "Active environment not found", OrsSessionExpired,
         r"session 5b0c9b9e-session is gone on the server .*\(server said 404: Active"),
        (410, True, "gone", OrsSessionExpired, r"is gone on the server"),
        (404, True, "Environment 'echo' does not implement score_group", OrsRequestError,
         r"refused \(404\): Environment 'echo' does not implement"),
        (500, True, "Traceback", OrsServerError, r"failed on the server \(500\): Traceback"),
        (503, False, "busy", OrsServerError, r"overloaded or still starting"),
        (504, False, "slow", OrsServerError, r"a gateway in front of it failed"),
    ],
)
def test_status_error(status: int, session: bool, detail: str, cls: type[OrsError],
                      pattern: str) -> None:
    where = Where(URL, "echo", SID, "echo")
    err = status_error(status, detail, what="tool call 'echo'", where=where, session=session)
    assert type(err) is cls
    assert re.search(pattern, err.message), err.message
    # the context is kept whatever the class
    assert (err.server, err.env_name, err.session_id, err.tool) == (URL, "echo", SID, "echo")
    if cls is not OrsSessionExpired:
        assert getattr(err, "status_code", None) == status


def test_error_for_status() -> None:
    gone = error_for_status(410, "m", server=URL, session_id=SID)
    assert type(gone) is OrsSessionExpired and gone.session_id == SID
    no_session = error_for_status(404, "m", server=URL)
    assert type(no_session) is OrsRequestError and no_session.status_code == 404
    assert isinstance(error_for_status(599, "m", server=URL), OrsServerError)
    teapot = error_for_status(418, "short and stout", server="http://u:pw@h:1/x?k=v", tool="t")
    assert isinstance(teapot, OrsRequestError) and teapot.status_code == 418
    assert str(teapot) == "short and stout [server=http://h:1/x, tool=t]"


# -- redirects -----------------------------------------------------------------------------


def test_redirect_within_the_server_keeps_headers() -> None:
    op = _ops().health()
    _send(op, None)
    moved = _send(op, Answer(308, {"location": "/health/"}, b""))
    assert isinstance(moved, Fetch) and moved.path == "/health/"
    assert moved.headers["X-API-Key"] == "sk-SECRET"
    assert _finish(op, _json(200, {"status": "ok"})) == {"status": "ok"}


def test_redirect_to_another_origin_drops_credentials() -> None:
    ops = Ops(Settings(location=URL, api_key="sk-SECRET", headers={"X-Team": "t1"},
                       basic_auth="Basic dTpw"), Clock())
    op = ops.create("echo", str(uuid.uuid4()), split="train", index=0,
                    secrets={"TOKEN": "s3cr3t"})
    ops.env_names = ["echo"]
    create = _send(op, None)
    assert isinstance(create, Fetch) and "X-Secrets" in create.headers
    moved = _send(op, Answer(307, {"location": "https://elsewhere.test/create"}, b""))
    assert isinstance(moved, Fetch) and moved.path == "https://elsewhere.test/create"
    sent = {k.lower() for k in moved.headers}
    assert not sent & {"x-api-key", "x-secrets", "authorization", "x-team"}
    assert "x-session-id" in sent and moved.content == create.content


def test_redirect_loop_and_non_http_redirect_are_refused() -> None:
    op = _ops().health()
    _send(op, None)
    for hop in range(5):
        _send(op, Answer(302, {"location": f"/h{hop}"}, b""))
    with pytest.raises(OrsProtocolError, match="redirected more than 5 times"):
        op.send(Answer(302, {"location": "/again"}, b""))
    op = _ops().health()
    _send(op, None)
    with pytest.raises(OrsProtocolError, match="not an http"):
        op.send(Answer(301, {"location": "ftp://x.test/"}, b""))


# -- SSE by httpx-sse, and the bytes beneath it ---------------------------------------------


WIRE = (b"event: task_id\r\ndata: 42\r\n\r\n: ping\r\n\r\nevent: chunk\rdata:  two spaces"
        b"\r\n\r\nevent: end\ndata: a\ndata:b\n\ndata: plain\r\n\r\n")


def test_sse_follows_the_standard_whatever_the_chunking() -> None:
    whole = _events([WIRE])
    assert whole == [("task_id", "42"), ("chunk", " two spaces"), ("end", "a\nb"),
                     ("message", "plain")]
    # CRLF split across pieces is one line end, not two; a UTF-8 character split too
    assert _events(WIRE[i:i + 1] for i in range(len(WIRE))) == whole
    word = "data: é😀\n\n".encode()
    assert _events(word[i:i + 1] for i in range(len(word))) == [("message", "é😀")]
    assert _events([b"data: \xff\xfe\n\n"]) == [("message", "\ufffd\ufffd")]
    # gzip is undone beneath the parser, in whatever pieces it arrives
    packed = gzip.compress(WIRE)
    assert _events((packed[i:i + 7] for i in range(0, len(packed), 7)), "gzip") == whole


def test_a_data_line_of_megabytes_arrives_whole() -> None:
    line = "x" * 3_000_000 + "é"
    wire = b"event: end\ndata: " + line.encode() + b"\n\n"
    assert _events(wire[i:i + 65_536] for i in range(0, len(wire), 65_536)) == [("end", line)]


def test_assembler_joins_chunks_and_keeps_the_task_id() -> None:
    asm = StreamAssembler(max_bytes=100, what="call", where=WHERE)
    assert not asm.feed("task_id", "abc")
    assert not asm.feed("chunk", '{"t": "')
    assert asm.feed("end", '  "}')
    assert asm.task_id == "abc" and asm.result() == {"t": "  "}
    assert asm.feed("chunk", "ignored after the end") and asm.result() == {"t": "  "}

    failed = StreamAssembler(max_bytes=100, what="call", where=WHERE)
    assert failed.feed("error", "RuntimeError: x") and failed.error == "RuntimeError: x"

    small = StreamAssembler(max_bytes=4, what="call", where=WHERE)
    with pytest.raises(OrsProtocolError, match="max_response_bytes=4"):
        small.feed("chunk", "12345")


def test_one_endless_line_stops_at_the_byte_cap() -> None:
    sink = StreamAssembler(max_bytes=100_000, what="call", where=WHERE)
    pieces = _forever(ACK + b"event: end\r\ndata: ", b"x" * 4096)
    taken: list[bytes] = []
    with pytest.raises(OrsProtocolError, match="max_response_bytes=100000"):
        _fed(sink, (taken.append(raw) or raw for raw in pieces))
    assert 100_000 < sum(map(len, taken)) < 105_000  # refused at the cap, not after reading on
    assert sink.task_id == "0123abcd" and not sink.done


def test_bytes_are_capped_however_they_arrive() -> None:
    for pieces in ([b": ping\r\n\r\n"] * 101, [b"event: chunk\r\ndata: 12345\r\n\r\n"] * 50):
        sink = StreamAssembler(max_bytes=1000, what="call", where=WHERE)
        with pytest.raises(OrsProtocolError, match="max_response_bytes=1000"):
            _fed(sink, pieces)


def test_gzip_bomb_stops_at_the_cap_while_inflating() -> None:
    bomb = gzip.compress(ACK + b"event: chunk\r\ndata: " + b"z" * 20_000_000)
    assert len(bomb) < 100_000
    sink = StreamAssembler(max_bytes=50_000, what="call", where=WHERE)
    with pytest.raises(OrsProtocolError, match="max_response_bytes=50000"):
        _fed(sink, [bomb], "gzip")
    # a small gzip answer decodes as sent, in whatever pieces it arrives
    small = gzip.compress(ACK + b"event: end\r\ndata: {}\r\n\r\n")
    sink = StreamAssembler(max_bytes=50_000, what="call", where=WHERE)
    assert _fed(sink, [small[:10], small[10:]], "gzip") == len(small)
    assert sink.done and sink.task_id == "0123abcd" and sink.result() == {}


def test_body_decoder_takes_raw_deflate_and_refuses_stacked_codings() -> None:
    # (the gzip cap, zlib deflate and unknown codings: tests/vector/test_vector.py)
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = raw.compress(b"abc" * 100) + raw.flush()
    decoder = BodyDecoder("deflate", max_bytes=300, what="t", where=WHERE)
    assert b"".join(decoder.feed(raw_deflate[i:i + 7])
                    for i in range(0, len(raw_deflate), 7)) == b"abc" * 100
    assert BodyDecoder("identity", max_bytes=3, what="t", where=WHERE).feed(b"abc") == b"abc"
    with pytest.raises(OrsProtocolError, match="did not ask for"):
        BodyDecoder("gzip, gzip", max_bytes=100, what="t", where=WHERE)


@pytest.mark.parametrize(("set_as", "hint"), [
    ("env", "Raise gym.make(..., call_timeout=...) or OrsEnv(call_timeout=...)"),
    ("HttpBackend", "Raise HttpBackend(call_timeout=...)"),
    ("AsyncHttpBackend", "Raise AsyncHttpBackend(call_timeout=...)"),
])
def test_endless_pings_end_at_call_timeout_named_as_the_user_set_it(
    set_as: str, hint: str
) -> None:
    clock = Clock()
    op = _ops(clock, call_timeout=3.0, set_as=set_as).call("echo", SID, "echo", {"text": "x"})
    step = _send(op, None)
    assert isinstance(step, Stream) and step.read_timeout == 3.0

    def pings() -> Iterator[bytes]:
        yield ACK
        while True:
            clock.now += 0.5
            yield b": ping\r\n\r\n"

    with pytest.raises(OrsTimeoutError, match=r"call_timeout=3\.0") as err:
        _perform(step, pings())
    assert clock.now <= 3.5  # cut off by the first piece after the deadline
    assert hint in str(err.value)
    assert ("HttpBackend" in str(err.value)) == (set_as != "env")


def test_events_after_the_result_are_ignored() -> None:
    sink = StreamAssembler(max_bytes=10**6, what="call", where=WHERE)
    _fed(sink, [ACK + b"event: end\r\ndata: {}\r\n\r\nevent: error\r\ndata: x\r\n\r\n"])
    assert sink.done and sink.error is None and sink.result() == {}


# -- tool calls: resuming a cut stream by its task id -------------------------------------


def test_cut_stream_is_resumed_by_task_id() -> None:
    op = _ops(max_retries=3, backoff=0.1).call("echo", SID, "echo", {"text": "x"})
    first = _send(op, None)
    assert isinstance(first, Stream) and json.loads(first.content)["task_id"] is None
    _perform(first, [ACK, b"event: chunk\r\ndata: {\"ok\"\r\n"])  # cut mid-event
    assert _send(op, Failure("broken", "RemoteProtocolError", "peer closed")) == Sleep(0.1)
    again = _send(op, None)
    assert isinstance(again, Stream) and json.loads(again.content) == \
        {"name": "echo", "input": {"text": "x"}, "task_id": "0123abcd"}
    end = b"event: end\r\ndata: " + json.dumps(RESULT).encode() + b"\r\n\r\n"
    result = _finish(op, _perform(again, [ACK, end]))
    assert isinstance(result, RunToolSuccess) and result.output.blocks[0].text == "hi"


def test_resumed_stream_rides_out_a_refused_connection() -> None:
    op = _ops(max_retries=3, backoff=0.1).call("echo", SID, "echo", {})
    first = _send(op, None)
    assert isinstance(first, Stream)
    _perform(first, [ACK])
    refused = Failure("refused", "ConnectError", "refused")
    assert _send(op, Failure("broken", "ReadError", "reset")) == Sleep(0.1)
    _send(op, None)
    assert _send(op, refused) == Sleep(0.2)  # acknowledged: worth waiting for
    again = _send(op, None)
    assert isinstance(again, Stream)
    with pytest.raises(OrsConnectionError, match="no longer knows call 0123abcd"):
        op.send(_perform(again, [b"event: error\r\ndata: unknown task_id\r\n\r\n"]))


def test_unacknowledged_call_is_not_resent() -> None:
    op = _ops(max_retries=3).call("echo", SID, "echo", {})
    _send(op, None)
    with pytest.raises(OrsConnectionError, match="had not acknowledged the call"):
        op.send(Failure("broken", "RemoteProtocolError", "peer closed"))
    op = _ops(max_retries=3).call("echo", SID, "echo", {})
    _send(op, None)
    with pytest.raises(OrsConnectionError, match="cannot reach the ORS server"):
        op.send(Failure("refused", "ConnectError", "refused"))  # fails at once, no Sleep
    op = _ops(max_retries=3).call("echo", SID, "echo", {})
    _send(op, None)
    assert _send(op, Answer(502, {}, b"bad gateway")) == Sleep(0.5)  # never started: resend
    op = _ops(max_retries=3, backoff=0.1).call("echo", SID, "echo", {})
    _send(op, None)
    assert _send(op, Answer(503, {}, b"busy")) == Sleep(0.1)  # refused unprocessed: resend


def test_tool_error_event_and_stream_without_result() -> None:
    op = _ops().call("echo", SID, "echo", {})
    step = _send(op, None)
    assert isinstance(step, Stream)
    with pytest.raises(OrsToolError, match="raised on the server: ValueError: no"):
        op.send(_perform(step, [ACK, b"event: error\r\ndata: ValueError: no\r\n\r\n"]))
    op = _ops(max_retries=0).call("echo", SID, "echo", {})
    step = _send(op, None)
    assert isinstance(step, Stream)
    with pytest.raises(OrsConnectionError, match="ended before its result"):
        op.send(_perform(step, [ACK, b": ping\r\n\r\n"]))


def _forever(head: bytes, filler: bytes) -> Iterator[bytes]:
    yield head
    while True:
        yield filler
