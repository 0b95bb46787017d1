"""A hosted session id issued by ``/create_session`` is given back when ``/create`` fails or
the creation is cancelled: a real front door behind fault injection counts the ids."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator

import pytest

from ors_gym.backends.http import AsyncHttpBackend
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.errors import OrsError
from ors_gym.serving import ServerThread
from tests._fault_servers import Fault, FaultyApp, UvicornThread, wait_for
from tests._front_door import FrontDoor

KEY = "ork-" + secrets.token_hex(16)
DEPLOYMENT = "Acme/echo"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FaultyApp, FrontDoor, str]]:
    with ServerThread([TEST_ENVS["Echo"]]) as echo:
        door = FrontDoor({DEPLOYMENT: echo.url}, KEY)
        faulty = FaultyApp(door)
        with UvicornThread(faulty) as srv:
            yield faulty, door, srv.url


@pytest.fixture
def door(served: tuple[FaultyApp, FrontDoor, str]) -> Iterator[tuple[FaultyApp, FrontDoor, str]]:
    faulty, app, _ = served
    faulty.reset()
    app.clear()
    yield served
    faulty.release()
    faulty.reset()


def _given_back(app: FrontDoor) -> tuple[int, int]:
    """Ids issued and ids given back, as the door saw them."""
    seen = app.requests()
    return (sum(s.path == "/create_session" and s.status == 200 for s in seen),
            sum(s.path == "/delete_session" and s.status == 200 for s in seen))


def test_a_failed_create_gives_its_session_id_back(
    door: tuple[FaultyApp, FrontDoor, str],
) -> None:
    faulty, app, url = door

    async def main() -> None:
        backend = AsyncHttpBackend(url, deployment=DEPLOYMENT, api_key=KEY)
        await backend.list_environments()
        faulty.add(Fault("/create", status=500))
        with pytest.raises(OrsError, match="500"):
            await backend.create_session("echo", split="train", index=0)
        assert backend.open_sessions == frozenset()
        issued, given_back = _given_back(app)
        assert issued >= 1 and given_back == issued  # back before the error was raised
        await backend.aclose()

    asyncio.run(main())


def test_a_cancelled_create_gives_its_session_id_back(
    door: tuple[FaultyApp, FrontDoor, str],
) -> None:
    faulty, app, url = door

    async def main() -> None:
        backend = AsyncHttpBackend(url, deployment=DEPLOYMENT, api_key=KEY)
        await backend.list_environments()
        faulty.add(Fault("/create", stall=True))  # held until released
        create = asyncio.ensure_future(backend.create_session("echo", split="train", index=0))
        await asyncio.to_thread(wait_for, lambda: any(
            path.endswith("/create") for path, _ in faulty.requests), 10, "/create sent")
        create.cancel()
        with pytest.raises(asyncio.CancelledError):
            await create
        issued, given_back = _given_back(app)
        assert issued >= 1 and given_back == issued  # back before the cancellation ended
        faulty.release()
        await backend.aclose()

    asyncio.run(main())


def test_close_gives_up_within_its_bound_and_says_how_many_ids_were_left(
    door: tuple[FaultyApp, FrontDoor, str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ors_gym.backends.http import async_

    faulty, _, url = door
    monkeypatch.setattr(async_, "CLOSE_TIMEOUT_S", 0.5)

    async def main() -> None:
        backend = AsyncHttpBackend(url, deployment=DEPLOYMENT, api_key=KEY)
        for index in range(2):
            await backend.create_session("echo", split="train", index=index)
        faulty.add(Fault("/delete", stall=True, times=2))  # held past close()'s bound
        await backend.aclose()
        faulty.release()

    asyncio.run(main())
    assert "close() gave up after 0.5 s with 2 of " in caplog.text
    assert KEY not in caplog.text


def test_a_refusal_that_echoes_its_input_shows_no_override_or_secret(
    door: tuple[FaultyApp, FrontDoor, str],
) -> None:
    faulty, _, url = door
    override = 'http://trainer.test/v1?token="tök-1234"'
    secret = "sk-session-secret-5678"
    echoed = json.dumps({"detail": [  # FastAPI's 422, quoting what it was sent
        {"loc": ["body", "env", "OPENAI_BASE_URL"], "msg": "bad", "input": override},
        {"loc": ["header", "x-secrets"], "msg": "bad", "input": secret}]})
    faulty.add(Fault("/create_session", status=422, body=echoed.encode()))

    async def main() -> str:
        async with AsyncHttpBackend(url, deployment=DEPLOYMENT, api_key=KEY) as backend:
            with pytest.raises(OrsError) as caught:
                await backend.create_session(
                    "echo", split="train", index=0, secrets={"TOKEN": (secret, ["x.test"])},
                    env_overrides={"OPENAI_BASE_URL": override})
        return str(caught.value)

    message = asyncio.run(main())
    assert "422" in message and "OPENAI_BASE_URL" in message and "***" in message
    for shown in (override, json.dumps(override)[1:-1], "tök-1234", "t\\u00f6k", secret):
        assert shown not in message, message
