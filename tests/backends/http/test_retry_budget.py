"""A server that stops answering is retried within a stated budget, and says so.

A real SDK server behind ``FaultyApp`` answers every tool call 503 (the gateway
of a server that went away): the first retry is logged at WARNING with what is
retried and the budget left, and the final error says how many tries over how
long and names the ``max_retries`` env option that sets the budget.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import gymnasium as gym
import pytest
from openreward.environments import Server

from ors_gym.envs.echo import Echo
from ors_gym.errors import OrsError
from ors_gym.serving import load_environment_classes
from ors_gym.settings import EnvSettings
from tests._fault_servers import Fault, FaultyApp, UvicornThread


@pytest.fixture
def faulty() -> Iterator[tuple[FaultyApp, str]]:
    app = FaultyApp(Server(load_environment_classes([Echo])).app)
    with UvicornThread(app) as thread:
        yield app, thread.url
    app.release()


def test_a_lost_server_warns_at_the_first_retry_and_counts_the_tries(
    faulty: tuple[FaultyApp, str], caplog: pytest.LogCaptureFixture
) -> None:
    app, url = faulty
    env = gym.make("ors/Remote-v0", base_url=url, env_name="echo", max_retries=2,
                   backend_options={"backoff": 0.01})
    try:
        env.reset(seed=0)
        app.add(Fault("/echo/call", 503, times=100))
        with caplog.at_level(logging.WARNING, logger="ors_gym"), \
                pytest.raises(OrsError) as err:
            env.step({"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]})
        assert app.hits["/echo/call"] == 3  # the first try and max_retries=2 retries
    finally:
        app.reset()
        env.close()
    assert "gave up after 3 tries over" in str(err.value)
    assert "max_retries=2: the env option max_retries sets it" in str(err.value)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    retry_lines = [w for w in warnings if "retrying the" in w]
    assert len(retry_lines) == 1, warnings  # the first retry only
    line = retry_lines[0]
    assert "retrying the tool call 'echo'" in line and "up to 2 more times" in line
    assert "session=" in line and "ran out" not in line


def test_max_retries_is_an_env_option_with_the_http_default() -> None:
    assert EnvSettings().max_retries is None  # the HTTP backend's own default (5)
    assert EnvSettings(max_retries=1).backend_kwargs()["max_retries"] == 1
    assert "max_retries" not in EnvSettings().backend_kwargs()
