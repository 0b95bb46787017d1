"""Many environments of one process under one key's rate limit, through a real door.

The door (``tests/_front_door.py``) admits ``RATE`` requests a second per API
key with a token bucket and answers the rest 429 with an honest
``Retry-After``; an SDK server stands behind it. The key's bucket starts empty
(another process of the key has spent its budget), so the door limits the
first request whatever the machine's speed: that the door limited is the
tests' own setting, not a race. 32 episodes through it: every one finishes,
each tool runs once, every session id is given back, no request got through
sooner than the rate allows, and the waiting is told in WARNINGs that count
every 429 once, not one WARNING per request.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
import uuid
from collections.abc import Iterator

import pytest

from ors_gym.async_env import AsyncOrsEnv
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.envs.testing.echo import Echo
from ors_gym.serving import ServerThread
from ors_gym.vector import OrsVectorEnv
from tests._fault_servers import UvicornThread
from tests._front_door import FrontDoor

KEY = "ork-" + secrets.token_hex(16)
DEPLOYMENT = "Acme/echo"
RATE = 80.0
ENVS = 32


@pytest.fixture
def door() -> Iterator[tuple[FrontDoor, str]]:
    with ServerThread([TEST_ENVS["Echo"]]) as echo:
        app = FrontDoor({DEPLOYMENT: echo.url}, KEY, rate=RATE, tokens=0)
        with UvicornThread(app) as srv:
            yield app, srv.url


async def _episode(url: str, token: str) -> float:
    async with AsyncOrsEnv(deployment=DEPLOYMENT, base_url=url, api_key=KEY,
                           max_retries=1) as env:
        await env.reset(options={"split": "train", "index": 0})
        obs, reward, *_ = await env.step({"tool_calls": [
            {"name": "slow_count", "arguments": {"token": token, "seconds": 0}}]})
        assert obs["text"].strip().endswith("1"), obs["text"]
        return float(reward)


def test_32_episodes_under_one_keys_rate_limit_all_finish(
    door: tuple[FrontDoor, str], caplog: pytest.LogCaptureFixture,
) -> None:
    app, url = door
    tokens = [uuid.uuid4().hex for _ in range(ENVS)]

    async def run() -> list[float]:
        return await asyncio.gather(*(_episode(url, t) for t in tokens))

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        rewards = asyncio.run(run())
    elapsed = time.monotonic() - started
    assert rewards == [0.0] * ENVS  # every episode finished (max_retries=1 did not end one)
    assert all(Echo.counts[t] == 1 for t in tokens)  # each tool once
    seen = app.requests()
    issued = {s for s in app.issued if any(
        r.headers.get("x-session-id") == s for r in seen)}
    assert not issued, f"{len(issued)} session ids never given back"
    given_back = [s.headers["x-session-id"] for s in seen
                  if s.path == "/delete_session" and s.status == 200]
    created = [s for s in seen if s.path == "/create_session" and s.status == 200]
    assert len(given_back) == len(set(given_back)) == len(created)
    assert app.limited >= 1  # certain: the bucket was empty at the first request
    assert elapsed >= app.admitted / RATE  # every admitted request's token was refilled
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    told = [w for w in warnings if "rate-limited this process" in w]
    assert told and len(warnings) == len(told), warnings
    counts = [re.search(r"(\d+) requests met 429 Too Many Requests (\d+) times", w)
              for w in told]
    assert all(counts), told
    # every 429 the door sent is told once, in a WARNING per episode of waiting
    assert sum(int(c[2]) for c in counts if c) == app.limited
    assert all(int(c[1]) <= int(c[2]) for c in counts if c)
    assert all("Retry-After up to 1 s" in w and "every one then got through" in w
               for w in told)
    assert KEY not in " ".join(warnings)


def test_a_vector_env_of_32_resets_through_the_rate_limit(door: tuple[FrontDoor, str]) -> None:
    app, url = door
    vec = OrsVectorEnv(num_envs=ENVS, deployment=DEPLOYMENT, base_url=url, api_key=KEY,
                       on_error="raise")
    try:
        _obs, infos = vec.reset(seed=0)
        assert len(infos["env_name"]) == ENVS
    finally:
        vec.close()
    assert app.limited >= 1  # certain: the bucket was empty at the first request
    seen = app.requests()
    assert sum(s.path == "/create_session" and s.status == 200 for s in seen) >= ENVS
    assert not {s for s in app.issued if any(r.headers.get("x-session-id") == s for r in seen)}
