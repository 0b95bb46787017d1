"""Hosted deployments through a real front door (``tests/_front_door.py``).

Two SDK servers stand behind the door: ``Acme/tools`` (Echo, then Math: a
variant) and ``Beta/math`` (Math). The SDK's own client and ors_gym both run
episodes through it; the door checks the key, issues the session ids, routes by
``X-Deployment`` and rate-limits with 429s.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import ors_gym  # noqa: F401 - registers ors/Remote-v0
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.backends.http import AsyncHttpBackend, HttpBackend
from ors_gym.backends.http._settings import hosted_location
from ors_gym.env import OrsEnv
from ors_gym.envs import BUNDLED
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.envs.testing.echo import Echo
from ors_gym.errors import OrsAuthError, OrsError, OrsRequestError
from ors_gym.registration import hosted_id, register_hosted
from ors_gym.secret import Secret
from ors_gym.serving import ServerThread
from ors_gym.vector import OrsVectorEnv
from tests._fault_servers import UvicornThread
from tests._front_door import FrontDoor, Seen

KEY = "ork-" + secrets.token_hex(16)
DEPLOYMENT = "Acme/tools"
TRAIN0 = {"split": "train", "index": 0}


@pytest.fixture(scope="module")
def door_app() -> Iterator[tuple[FrontDoor, str]]:
    with ServerThread([TEST_ENVS["Echo"], BUNDLED["Math"]]) as tools, \
            ServerThread([BUNDLED["Math"]]) as math:
        app = FrontDoor({DEPLOYMENT: tools.url, "Beta/math": math.url}, KEY)
        with UvicornThread(app) as srv:
            yield app, srv.url


@pytest.fixture
def door(door_app: tuple[FrontDoor, str]) -> Iterator[tuple[FrontDoor, str]]:
    app, url = door_app
    app.clear()
    app.rate_limit_every = None
    yield app, url
    app.rate_limit_every = None
    app.require_user_agent = False
    app.bad_gateway = app.cut_after_task_id = 0


@pytest.fixture
def hosted_vars(door: tuple[FrontDoor, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """The SDK's variables pointing at the door; returns its URL."""
    monkeypatch.setenv("OPENREWARD_SESSION_URL", door[1])
    monkeypatch.setenv("OPENREWARD_API_KEY", KEY)
    return door[1]


def _episode(env: OrsEnv) -> None:
    obs, _info = env.reset(options=TRAIN0)
    assert "echo" in obs["text"].lower()
    _, reward, terminated, _, _ = env.step({"tool_calls": [
        {"name": "echo", "arguments": {"text": "hi"}}]})
    assert not terminated
    _, reward, terminated, _, _ = env.step({"tool_calls": [
        {"name": "finish", "arguments": {"reward": 0.5}}]})
    assert terminated and reward == 0.5


def _session_ids(seen: list[Seen]) -> set[str]:
    return {s.headers["x-session-id"] for s in seen if "x-session-id" in s.headers}


# -- the dialect -------------------------------------------------------------------------


def test_episode_through_the_door(door: tuple[FrontDoor, str]) -> None:
    app, url = door
    with OrsEnv(deployment=DEPLOYMENT, base_url=url, api_key=KEY) as env:
        _episode(env)
    seen = app.requests()
    assert all(s.headers.get("x-deployment") == DEPLOYMENT for s in seen)
    assert all(s.headers.get("x-api-key") == KEY for s in seen)
    assert all(s.status < 400 for s in seen), [(s.path, s.status) for s in seen]
    ids = _session_ids(seen)
    assert ids and all(sid.startswith("door-") for sid in ids)
    paths = [(s.path, s.status) for s in seen]
    assert ("/tools", 308) in paths and ("/echo/tools", 200) in paths  # bare, redirected
    assert paths.count(("/tools", 308)) == 1 and ("/echo/prompt", 200) in paths  # then direct
    assert not [p for p, status in paths if status == 308 and p != "/tools"]
    assert ("/delete_session", 200) in paths
    assert not _session_ids(seen) & set(app.issued)  # every id given back at close


def test_variables_and_gym_make(hosted_vars: str, door: tuple[FrontDoor, str]) -> None:
    env = gym.make("ors/Remote-v0", deployment=DEPLOYMENT)
    try:
        assert env.unwrapped.backend.location == hosted_vars  # type: ignore[attr-defined]
        _episode(env.unwrapped)  # type: ignore[arg-type]
    finally:
        env.close()
    assert door[0].requests()


def test_hosted_location_is_the_sdks() -> None:
    assert hosted_location({}) == "https://sessions.openreward.ai"
    assert hosted_location({"OPENREWARD_URL": "http://example.test:81"}) == (
        "http://sessions.example.test:81"
    )
    assert hosted_location({"OPENREWARD_URL": "http://a.test",
                            "OPENREWARD_SESSION_URL": "http://s.test"}) == "http://s.test"


def test_explicit_arguments_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENREWARD_SESSION_URL", "http://from-variable.test")
    monkeypatch.setenv("OPENREWARD_API_KEY", "from-variable")
    b = HttpBackend("http://given.test", deployment=DEPLOYMENT, api_key="given")
    assert b.location == "http://given.test" and b.settings.api_key == "given"
    b2 = HttpBackend(deployment=DEPLOYMENT)
    assert b2.location == "http://from-variable.test" and b2.settings.api_key == "from-variable"
    monkeypatch.delenv("OPENREWARD_API_KEY")
    assert HttpBackend("http://plain.test").settings.api_key is None  # plain: nothing read
    with pytest.raises(ValueError, match="deployment"):
        HttpBackend()
    with pytest.raises(ValueError, match="Namespace/name"):
        HttpBackend(deployment="a/b/c")
    with pytest.raises(ValueError, match="needs deployment"):
        HttpBackend("http://plain.test", variant="math")


def test_variant_prefixes_paths(door: tuple[FrontDoor, str]) -> None:
    app, url = door
    with OrsEnv(deployment=DEPLOYMENT, variant="math", base_url=url, api_key=KEY) as env:
        _obs, info = env.reset(options={"split": "test", "index": 0})
        assert info["env_name"] == "math"
        _, _reward, terminated, _, _ = env.step({"tool_calls": [
            {"name": "submit", "arguments": {"answer": 0}}]})
        assert terminated
    seen = app.requests()
    assert all(s.status != 308 for s in seen)
    session_paths = {s.path for s in seen if s.path.endswith(("/prompt", "/call", "/tools"))}
    assert session_paths and all(p.startswith("/math/") for p in session_paths)
    create = next(s for s in seen if s.path == "/create")
    assert create.status == 200


def test_async_and_vector_envs(door: tuple[FrontDoor, str]) -> None:
    app, url = door

    async def run() -> None:
        async with AsyncOrsEnv(deployment="Beta/math", base_url=url, api_key=KEY) as env:
            _obs, _ = await env.reset(options={"split": "test", "index": 1})
            _, _, terminated, _, _ = await env.step({"tool_calls": [
                {"name": "submit", "arguments": {"answer": 1}}]})
            assert terminated

    asyncio.run(run())
    vec = OrsVectorEnv(num_envs=2, deployment=DEPLOYMENT, base_url=url, api_key=KEY)
    try:
        vec.reset(seed=0)
        _, _, _, truncated, infos = vec.step([{"tool_calls": [
            {"name": "echo", "arguments": {"text": "v"}}]}] * 2)
        assert not truncated.any(), infos
    finally:
        vec.close()
    seen = app.requests()
    assert {s.headers["x-deployment"] for s in seen} == {"Beta/math", DEPLOYMENT}
    assert all(sid.startswith("door-") for sid in _session_ids(seen))


def test_register_hosted(door: tuple[FrontDoor, str]) -> None:
    _, url = door
    env_id = register_hosted(DEPLOYMENT, base_url=url, api_key=KEY)
    assert env_id == "openreward/Acme.tools-v0" == hosted_id(DEPLOYMENT)
    assert hosted_id(DEPLOYMENT, "math") == "openreward/Acme.tools.math-v0"
    spec = gym.spec(env_id)
    assert isinstance(spec.kwargs["api_key"], Secret) and KEY not in repr(spec)
    env = gym.make(env_id)
    try:
        _episode(env.unwrapped)  # type: ignore[arg-type]
    finally:
        env.close()
    variant_id = register_hosted(DEPLOYMENT, "math", base_url=url, api_key=KEY)
    env = gym.make(variant_id)
    try:
        _, info = env.reset(options={"split": "test", "index": 0})
        assert info["env_name"] == "math"
    finally:
        env.close()


def test_rate_limit_waits_for_retry_after(door: tuple[FrontDoor, str]) -> None:
    app, url = door
    app.rate_limit_every, app.retry_after = 3, 1
    started = time.monotonic()
    with OrsEnv(deployment=DEPLOYMENT, base_url=url, api_key=KEY) as env:
        _episode(env)
    elapsed = time.monotonic() - started
    limited = [s for s in app.requests() if s.status == 429]
    assert limited
    # Each 429 waited its Retry-After: 1, but for the best-effort release at close.
    assert elapsed >= 0.9 * (len(limited) - 1)


def test_a_forgotten_discovery_id_is_replaced(door: tuple[FrontDoor, str]) -> None:
    app, url = door
    with HttpBackend(deployment="Beta/math", base_url=url, api_key=KEY) as b:
        first = b.task("beta/math", "test", 0)
        app.issued.clear()  # the gateway forgets every id it issued (a restart, a reaper)
        assert b.task("beta/math", "test", 0) == first
    refused = [s for s in app.requests() if s.status == 404]
    assert len(refused) == 1 and refused[0].path == "/math/task"  # redirect learnt


def test_messages_through_the_door(door: tuple[FrontDoor, str]) -> None:
    app, url = door
    with HttpBackend(deployment=DEPLOYMENT, base_url=url, api_key=KEY) as b:
        sid = b.create_session(DEPLOYMENT, split="train", index=0)
        messages = b.messages(DEPLOYMENT, sid)
    assert messages[0].role == "user" and "echo" in messages[0].blocks[0].text.lower()  # type: ignore[union-attr]
    assert ("/echo/messages", 200) in [(s.path, s.status) for s in app.requests()]


# -- the SDK's client and ors_gym send the same headers ----------------------------------

#: Headers of the protocol (not of the HTTP client library) an ORS request carries.
_ENV_SEGMENTS = ("/echo/", "/math/")


def _endpoint(path: str) -> str:
    for prefix in _ENV_SEGMENTS:
        if path.startswith(prefix):
            return "/" + path[len(prefix):]
    return path


def _protocol_headers(seen: list[Seen]) -> dict[str, set[str]]:
    """Per endpoint, the ``X-`` header names the client sent (pings excluded: timing)."""
    out: dict[str, set[str]] = {}
    for s in seen:
        if s.path == "/ping":
            continue
        names = {k for k in s.headers if k.startswith("x-")}
        out.setdefault(_endpoint(s.path), set()).update(names)
    return out


async def _sdk_episode() -> None:
    from openreward import AsyncOpenReward

    client = AsyncOpenReward(api_key=KEY)
    env = client.environments.get(DEPLOYMENT)
    async with env.session(split="train", index=0) as session:
        await session.get_prompt()
        await session.list_tools()
        await session.call_tool("echo", {"text": "hi"})
    await client.environments.aclose()


def test_sdk_and_ors_gym_send_the_same_headers(
    hosted_vars: str, door: tuple[FrontDoor, str]
) -> None:
    app, _ = door
    asyncio.run(_sdk_episode())
    sdk = app.requests()
    app.clear()
    with OrsEnv(deployment=DEPLOYMENT) as env:
        env.reset(options=TRAIN0)
        env.step({"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]})
    ours = app.requests()
    for seen in (sdk, ours):
        assert all(s.status in (200, 308) for s in seen), [(s.path, s.status) for s in seen]
        assert all(s.headers["x-api-key"] == KEY for s in seen)
        assert {s.headers.get("x-deployment") for s in seen} <= {DEPLOYMENT, None}
        assert all(sid.startswith("door-") for sid in _session_ids(seen))
        for s in seen:
            if s.path in ("/create_session", "/call", "/echo/call"):
                assert s.headers["accept"] == "text/event-stream"
    sdk_headers, our_headers = _protocol_headers(sdk), _protocol_headers(ours)
    common = set(sdk_headers) & set(our_headers)
    assert {"/create_session", "/create", "/prompt", "/task_tools", "/call",
            "/delete", "/delete_session"} <= common
    for endpoint in sorted(common):
        expected = set(sdk_headers[endpoint])
        if endpoint in ("/delete", "/delete_session"):
            # The SDK leaves X-Deployment off its deletes; ors_gym sends it on every request.
            expected.add("x-deployment")
        assert our_headers[endpoint] == expected, endpoint
    # The key travels to the environment as the SDK sends it: scoped to the platform's hosts.
    for path in ("/create_session", "/create"):
        sdk_secrets = [_secrets(s) for s in sdk if s.path == path]
        our_secrets = [_secrets(s) for s in ours if s.path == path and "x-secrets" in s.headers]
        assert sdk_secrets and sdk_secrets == our_secrets  # the discovery id carries none


def _secrets(seen: Seen) -> Any:
    return json.loads(base64.b64decode(seen.headers["x-secrets"]))


# -- errors ----------------------------------------------------------------------------


def _no_key_anywhere(*texts: str) -> None:
    for text in texts:
        assert KEY not in text


def test_wrong_key(door: tuple[FrontDoor, str], caplog: pytest.LogCaptureFixture) -> None:
    app, url = door
    wrong = "ork-wrong-" + secrets.token_hex(8)
    caplog.set_level(logging.DEBUG)
    backend = HttpBackend(deployment=DEPLOYMENT, base_url=url, api_key=wrong)
    with backend, pytest.raises(OrsAuthError) as err:
        backend.create_session(DEPLOYMENT, split="train", index=0)
    assert "OPENREWARD_API_KEY" in str(err.value) and err.value.status_code == 401
    assert isinstance(err.value, OrsRequestError)
    # Never retried. Only this key's requests count: a session deletion an earlier test
    # left running in the background may reach the shared door meanwhile.
    assert len([r for r in app.requests() if r.headers.get("x-api-key") == wrong]) == 1
    for text in (str(err.value), repr(err.value), repr(backend), caplog.text):
        assert wrong not in text


def test_missing_key(
    hosted_vars: str, door: tuple[FrontDoor, str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("OPENREWARD_API_KEY")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(OrsAuthError, match="OPENREWARD_API_KEY"):
        OrsEnv(deployment=DEPLOYMENT).reset()


def test_key_never_shown(door: tuple[FrontDoor, str], caplog: pytest.LogCaptureFixture) -> None:
    _, url = door
    caplog.set_level(logging.DEBUG)
    env = OrsEnv(deployment=DEPLOYMENT, base_url=url, api_key=KEY)
    try:
        env.reset(options=TRAIN0)
        env.step("not a tool call")
        texts = [repr(env), repr(env.backend), repr(env.settings), str(env.spec)]
    finally:
        env.close()
    with pytest.raises(OrsRequestError) as err:
        OrsEnv(deployment="Nobody/nothing", base_url=url, api_key=KEY).reset()
    texts += [str(err.value), repr(err.value), caplog.text]
    _no_key_anywhere(*texts)


def test_unknown_deployment(door: tuple[FrontDoor, str]) -> None:
    _, url = door
    with pytest.raises(OrsRequestError) as err:
        OrsEnv(deployment="Acme/Tools", base_url=url, api_key=KEY).reset()
    assert err.value.status_code == 404
    message = str(err.value)
    assert "Deployment not found" in message and "case-sensitive" in message
    assert "Acme/Tools" in message


def test_client_made_ids_are_refused(door: tuple[FrontDoor, str]) -> None:
    """The door accepts only ids it issued: the plain-server dialect fails there."""
    _, url = door
    with HttpBackend(url, api_key=KEY, headers={"X-Deployment": DEPLOYMENT}) as b, \
            pytest.raises(OrsRequestError, match="/create_session"):
        b.create_session("echo", task_spec={"id": "x"})


def test_async_backend_through_the_door(door: tuple[FrontDoor, str]) -> None:
    _, url = door

    async def run() -> Any:
        async with AsyncHttpBackend(deployment=DEPLOYMENT, base_url=url, api_key=KEY) as b:
            sid = await b.create_session(DEPLOYMENT, split="train", index=1)
            await b.prompt(DEPLOYMENT, sid)
            return await b.call(DEPLOYMENT, sid, "echo", {"text": "async"})

    result = asyncio.run(run())
    assert result.ok


# -- the session-id operation, sans-IO -----------------------------------------------------


def test_session_id_operation() -> None:
    """An id is the server's once its ``task_id`` event arrived, however the stream ends;
    a 429 waits its Retry-After; a 401 is never retried."""
    from ors_gym.backends.http._ops import Ops
    from ors_gym.backends.http._settings import Settings
    from ors_gym.backends.http._steps import Answer, Failure, Sleep, Stream

    ops = Ops(Settings(location="http://gw.test", deployment="A/b", api_key="k"), lambda: 0.0)
    op = ops.exchange.new_session_id(ops.where())
    step = op.send(None)
    assert isinstance(step, Stream) and step.path == "/create_session"
    assert step.headers["X-Deployment"] == "A/b" and step.headers["X-API-Key"] == "k"
    step.sink.feed("task_id", "gw-1")
    with pytest.raises(StopIteration) as done:
        op.send(Failure("broken", "ReadError", "the connection dropped"))
    assert done.value.value == "gw-1"

    op = ops.exchange.new_session_id(ops.where())
    op.send(None)
    sleep = op.send(Answer(429, {"retry-after": "2"}, b'{"detail": "slow down"}'))
    assert isinstance(sleep, Sleep) and sleep.seconds == 2.0
    step = op.send(None)
    assert isinstance(step, Stream)
    with pytest.raises(OrsAuthError, match="OPENREWARD_API_KEY"):
        op.send(Answer(401, {}, b'{"detail": "bad key k"}'))


def test_a_url_without_a_scheme_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENREWARD_SESSION_URL", raising=False)
    monkeypatch.setenv("OPENREWARD_URL", "openreward.ai")
    with pytest.raises(ValueError, match=r"OPENREWARD_URL='openreward.ai' is not an http\(s\) URL"
                       r".*OPENREWARD_URL=https://openreward.ai"):
        HttpBackend(deployment=DEPLOYMENT)
    monkeypatch.setenv("OPENREWARD_SESSION_URL", "sessions.example.test")
    with pytest.raises(ValueError, match=r"OPENREWARD_SESSION_URL='sessions\.example\.test'"):
        HttpBackend(deployment=DEPLOYMENT)


def test_an_unreachable_host_names_the_variables_and_the_missing_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("OPENREWARD_SESSION_URL", url)
    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)
    with pytest.raises(OrsError) as err, HttpBackend(deployment=DEPLOYMENT) as b:
        b.create_session("tools", split="train", index=0)
    text = str(err.value)
    assert f"session host {url} from OPENREWARD_SESSION_URL" in text
    assert "no API key is set (OPENREWARD_API_KEY is empty" in text
    assert "ors-gym serve" not in text  # not a local server


# -- a front door's faults, as a CDN or a proxy makes them --------------------------------


def _calls(seen: list[Seen]) -> list[Seen]:
    return [s for s in seen if s.path.endswith("/call")]


def test_every_request_says_who_asks_and_what_it_accepts(door: tuple[FrontDoor, str]) -> None:
    from ors_gym.backends.http._codec import USER_AGENT

    app, url = door
    app.require_user_agent = True  # a CDN refusing requests that name no client
    with OrsEnv(deployment=DEPLOYMENT, base_url=url, api_key=KEY) as env:
        _episode(env)
    seen = app.requests()
    assert seen and all(s.status < 400 for s in seen), [(s.path, s.status) for s in seen]
    assert {s.headers["user-agent"] for s in seen} == {USER_AGENT}
    assert USER_AGENT.startswith("ors-gym/") and " python-httpx/" in USER_AGENT
    for s in seen:
        streamed = s.path in ("/create_session",) or s.path.endswith("/call")
        assert s.headers["accept"] == ("text/event-stream" if streamed else "application/json")


def test_a_refusal_that_does_not_name_the_key_is_not_blamed_on_it(
    door: tuple[FrontDoor, str],
) -> None:
    app, url = door
    app.require_user_agent = True
    backend = HttpBackend(deployment=DEPLOYMENT, base_url=url, api_key=KEY,
                          headers={"User-Agent": ""})
    with backend, pytest.raises(OrsAuthError) as err:
        backend.create_session(DEPLOYMENT, split="train", index=0)
    text = str(err.value)
    assert err.value.status_code == 403 and "(403)" in text
    assert "an HTML page titled '403 Forbidden'" in text
    assert "does not blame the API key" in text and "OPENREWARD_API_KEY" not in text


def test_a_bad_gateway_page_before_the_call_started_is_retried_and_the_tool_runs_once(
    door: tuple[FrontDoor, str], caplog: pytest.LogCaptureFixture,
) -> None:
    app, url = door
    token = uuid.uuid4().hex
    with OrsEnv(deployment=DEPLOYMENT, base_url=url, api_key=KEY, backoff=0.01) as env:
        env.reset(options=TRAIN0)
        app.clear()
        app.bad_gateway = 2  # nginx's page while a backend moves
        with caplog.at_level(logging.WARNING, logger="ors_gym"):
            obs, *_ = env.step({"tool_calls": [
                {"name": "slow_count", "arguments": {"token": token}}]})
    assert "1" in obs["text"] and Echo.counts[token] == 1
    assert [s.status for s in _calls(app.requests())] == [502, 502, 200]
    [line] = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert "(502): an HTML page titled '502 Bad Gateway'" in line
    assert "the tool had not started" in line and "retrying the tool call 'slow_count'" in line
    assert "up to 5 more times" in line and "cannot reach" not in line
    _no_key_anywhere(line)


def test_a_stream_cut_after_its_task_id_is_resumed_with_a_warning_that_says_so(
    door: tuple[FrontDoor, str], caplog: pytest.LogCaptureFixture,
) -> None:
    app, url = door
    token = uuid.uuid4().hex
    with OrsEnv(deployment=DEPLOYMENT, base_url=url, api_key=KEY, backoff=0.01) as env:
        env.reset(options=TRAIN0)
        app.clear()
        app.cut_after_task_id = 1
        with caplog.at_level(logging.WARNING, logger="ors_gym"):
            obs, *_ = env.step({"tool_calls": [
                {"name": "slow_count", "arguments": {"token": token, "seconds": 0.3}}]})
    assert "1" in obs["text"] and Echo.counts[token] == 1  # resumed, not run again
    assert len(_calls(app.requests())) == 2
    [line] = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert "the stream was cut after the server acknowledged the call as task" in line
    assert "resumed by that task_id, so the tool runs once" in line
    assert "up to 5 more times" in line
    assert "cannot reach" not in line and "API key" not in line


def test_each_session_id_is_given_back_once_at_close(door: tuple[FrontDoor, str]) -> None:
    app, url = door
    with OrsEnv(deployment=DEPLOYMENT, base_url=url, api_key=KEY) as env:
        _episode(env)
        env.reset(options=TRAIN0)
    given_back = [s.headers["x-session-id"] for s in app.requests()
                  if s.path == "/delete_session"]
    assert given_back and len(given_back) == len(set(given_back)), given_back
    issued = [s for s in app.requests() if s.path == "/create_session"]
    assert len(given_back) == len(issued)  # every id once: the discovery id and two episodes
