"""Shared fixtures: a real SDK server on 127.0.0.1 (ephemeral port) with the bundled envs."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")


def _bundled_specs() -> list[str]:
    from ors_gym.envs import BUNDLED, DEFAULT_ENV

    specs = [BUNDLED[DEFAULT_ENV]]
    specs += [spec for name, spec in BUNDLED.items() if name != DEFAULT_ENV]
    return specs


@pytest.fixture(scope="session")
def server() -> Iterator[object]:
    """One real ORS server hosting every bundled environment, for the whole run."""
    from ors_gym.serving import ServerThread

    with ServerThread(_bundled_specs()) as srv:
        yield srv


@pytest.fixture(scope="session")
def server_url(server: object) -> str:
    return server.url  # type: ignore[attr-defined, no-any-return]


@pytest.fixture(params=["http", "local"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    """Parametrizes a test over both backends (HTTP to the real server, and in-process)."""
    return str(request.param)


@pytest.fixture
def make_env(backend_kind: str, server_url: str) -> Iterator[object]:
    """``make_env(name, **kwargs)``: an OrsEnv over the parametrized backend, closed after."""
    from ors_gym.env import OrsEnv
    from ors_gym.envs import BUNDLED

    made: list[OrsEnv] = []

    def factory(name: str, **kwargs: object) -> OrsEnv:
        if backend_kind == "http":
            env = OrsEnv(base_url=server_url, env_name=name.lower(), **kwargs)  # type: ignore[arg-type]
        else:
            env = OrsEnv(env_class=BUNDLED[name], **kwargs)  # type: ignore[arg-type]
        made.append(env)
        return env

    yield factory
    for env in made:
        env.close()
