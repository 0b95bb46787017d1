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
    """``make_server(**config)``: an ``OrsResourcesServer`` (config fields as keywords);
    every one made is closed after the test."""
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    from ors_gym.nemo_gym import OrsResourcesServer, OrsResourcesServerConfig

    made: list[OrsResourcesServer] = []

    def factory(**config: Any) -> OrsResourcesServer:
        cfg = OrsResourcesServerConfig(host="127.0.0.1", port=0, entrypoint="app.py",
                                       name="ors", **config)
        client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=0),
                              global_config_dict=OmegaConf.create({}))
        server = OrsResourcesServer(config=cfg, server_client=client)
        made.append(server)
        return server

    yield factory
    for server in made:
        server.close()
