"""What a hosted user is told when the platform says no, against the stand-in platform:
an account without credits (402) on the API host and on the session host, the
platform API's own failure (a 500 to a rollout upload), an API host nothing listens
on, and an environment whose failure quotes the ``env_overrides`` it read."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from ors_gym.env import OrsEnv
from ors_gym.errors import OrsConnectionError, OrsPaymentError, OrsRequestError, OrsServerError
from ors_gym.platform import AsyncPlatformClient, PlatformClient
from tests._platform import DEPLOYMENT, KEY, Platform

NO_CREDITS = (402, {"detail": "Insufficient credits: top up your balance"})
OVERRIDES = {"OPENAI_BASE_URL": "http://trainer.test:8000/v1", "OPENAI_API_KEY": "sk-trainer-9"}


def test_a_402_is_an_account_without_credits_on_every_endpoint(platform: Platform) -> None:
    platform.refuse = NO_CREDITS
    with PlatformClient() as client, pytest.raises(OrsPaymentError) as api:
        client.required_secrets(DEPLOYMENT)
    with OrsEnv(deployment=DEPLOYMENT) as env, pytest.raises(OrsPaymentError) as session:
        env.reset(options={"split": "train", "index": 0})
    for raised in (api.value, session.value):
        assert isinstance(raised, OrsRequestError) and raised.status_code == 402
        assert "has no credits left" in raised.message and "Insufficient credits" in raised.message
        assert KEY not in str(raised)
    # Refused once each: a 402 is not retried.
    assert len(platform.requests("/v1/")) == 1
    assert len(platform.requests("/create_session")) == 1


def test_a_500_from_the_platform_api_is_the_platforms_not_an_environments(
    platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    platform.refuse = (500, {"detail": "database unavailable"})
    platform.refuse_prefix = "/v1/rollouts"

    async def post() -> None:
        async with AsyncPlatformClient() as client:
            await client.post_rollouts([{"type": "rollout", "eventId": "e1"}])

    with pytest.raises(OrsServerError) as raised:
        asyncio.run(post())
    message = raised.value.message
    assert "OpenReward platform's API (500): database unavailable" in message
    assert "setup()" not in message and "in the environment" not in message


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_api_host_names_its_variable_not_a_server_to_start(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENREWARD_API_URL", f"http://127.0.0.1:{_closed_port()}")
    with PlatformClient() as client, pytest.raises(OrsConnectionError) as raised:
        client.required_secrets(DEPLOYMENT)
    message = raised.value.message
    assert "cannot reach the OpenReward platform API host" in message
    assert "from OPENREWARD_API_URL" in message
    assert "ors-gym serve" not in message and "ORS server" not in message


def test_env_overrides_are_masked_in_a_create_failure_that_quotes_them(
    platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    platform.create_quotes_env = True
    caplog.set_level(logging.DEBUG)
    with OrsEnv(deployment=DEPLOYMENT, env_overrides=OVERRIDES) as env, \
            pytest.raises(OrsServerError) as raised:
        env.reset(options={"split": "train", "index": 0})
    message = str(raised.value)
    assert "setup() failed with the variables" in message  # the server's words are kept
    assert "***" in message
    for value in OVERRIDES.values():
        assert value not in message and value not in caplog.text
