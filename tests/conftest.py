"""Shared fixtures: a real SDK server on 127.0.0.1 (ephemeral port) with the bundled envs and
the test ones (registered for every test);
and the order in which test files are handed to the workers."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding the most tests marked ``slow`` come first, each file kept whole and in
    its own order. The test command hands files to its workers in this order (``--dist loadfile
    --no-loadscope-reorder``), so the long files start early and the short ones fill in at the
    end, rather than one long file running alone while the other worker idles."""
    slow: Counter[Path] = Counter(item.path for item in items if item.get_closest_marker("slow"))
    first: dict[Path, int] = {}
    for index, item in enumerate(items):
        first.setdefault(item.path, index)
    items.sort(key=lambda item: (-slow[item.path], first[item.path]))


def pytest_configure(config: pytest.Config) -> None:
    """The test environments' ids (``ors/Echo-v0``, ``ors/Latency-v0``) for every test."""
    from ors_gym.envs.testing import register_test_envs

    register_test_envs()


def _served_specs() -> list[str]:
    from ors_gym.envs import BUNDLED, DEFAULT_ENV
    from ors_gym.envs.testing import TEST_ENVS

    specs = [BUNDLED[DEFAULT_ENV]]
    specs += [spec for name, spec in BUNDLED.items() if name != DEFAULT_ENV]
    return specs + list(TEST_ENVS.values())


@pytest.fixture(scope="session")
def server() -> Iterator[object]:
    """One real ORS server hosting every bundled environment and the test ones (Echo,
    Latency), for the whole run."""
    from ors_gym.serving import ServerThread

    with ServerThread(_served_specs()) as srv:
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
    from ors_gym.envs.testing import TEST_ENVS

    specs = {**BUNDLED, **TEST_ENVS}
    made: list[OrsEnv] = []

    def factory(name: str, **kwargs: object) -> OrsEnv:
        if backend_kind == "http":
            env = OrsEnv(base_url=server_url, env_name=name.lower(), **kwargs)  # type: ignore[arg-type]
        else:
            env = OrsEnv(env_class=specs[name], **kwargs)  # type: ignore[arg-type]
        made.append(env)
        return env

    yield factory
    for env in made:
        env.close()
