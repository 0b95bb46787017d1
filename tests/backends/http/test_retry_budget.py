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

from ors_gym.backends.http import HttpBackend
from ors_gym.backends.http.options import HttpOptions, option_names
from ors_gym.envs.testing.echo import Echo
from ors_gym.errors import OrsError
from ors_gym.serving import load_environment_classes
from ors_gym.settings import EnvSettings
from tests._fault_servers import Fault, FaultyApp, UvicornThread, json_body


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
    assert ("max_retries=2; raise it with gym.make(..., max_retries=...) or "
            "OrsEnv(max_retries=...)") in str(err.value)
    assert "HttpBackend" not in str(err.value)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    retry_lines = [w for w in warnings if "retrying the" in w]
    assert len(retry_lines) == 1, warnings  # the first retry only
    line = retry_lines[0]
    assert "retrying the tool call 'echo'" in line and "up to 2 more times" in line
    assert "session=" in line and "ran out" not in line


def test_every_http_option_is_an_env_option_by_its_own_name() -> None:
    assert EnvSettings().http == HttpOptions()  # the HTTP backend's own defaults
    assert EnvSettings.from_options({"max_retries": 1}).http.max_retries == 1
    settings = EnvSettings.from_options({"call_timeout": 7, "backend_options": {"backoff": 0.1}})
    assert (settings.http.call_timeout, settings.http.backoff) == (7, 0.1)
    for name in option_names():  # reachable by name, and refused when misspelled
        with pytest.raises(TypeError, match=f"did you mean '{name}'"):
            EnvSettings.from_options({name + "x": 1})
    with pytest.raises(TypeError, match="given both by name and in backend_options"):
        EnvSettings.from_options({"timeout": 1, "backend_options": {"timeout": 2}})


def test_the_rate_limit_warning_counts_a_request_that_then_failed(
    faulty: tuple[FaultyApp, str], caplog: pytest.LogCaptureFixture
) -> None:
    app, url = faulty
    app.add(Fault("/health", status=429, headers={"Retry-After": "0"}))
    app.add(Fault("/health", status=500, body=json_body("boom")))  # after the 429: no retry
    with HttpBackend(url) as backend, pytest.raises(OrsError, match="500"):
        backend.health()
    told = [r.getMessage() for r in caplog.records if "rate-limited" in r.getMessage()]
    assert len(told) == 1 and "1 of them then failed" in told[0], told
