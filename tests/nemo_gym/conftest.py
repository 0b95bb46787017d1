"""Fixtures for the NeMo Gym tests (run in the venv of scripts/nemo-gym-venv.sh): a real ORS
server with the bundled Counter and Toolbox and the test's own ``Graded``, and resources servers
made from a config and closed after."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ors_gym.envs import BUNDLED


@pytest.fixture(scope="module")
def ors_url() -> Iterator[str]:
    """An ORS server on 127.0.0.1 hosting Counter, Toolbox and Graded."""
    from _envs import Graded

    from ors_gym.serving import ServerThread

    with ServerThread([BUNDLED["Counter"], BUNDLED["Toolbox"], Graded]) as srv:
        yield srv.url


@pytest.fixture
def make_server() -> Iterator[Callable[..., Any]]:
    """``make_server(**config)``: ``resources_server(**config)``; every one made is closed
    after the test."""
    from _serve import resources_server

    made: list[Any] = []

    def factory(**config: Any) -> Any:
        made.append(resources_server(**config))
        return made[-1]

    yield factory
    for server in made:
        server.close()
