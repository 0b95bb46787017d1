"""``Servers``: several ASGI apps under uvicorn on ONE event loop, in one daemon thread; and
``resources_server``: an ``OrsResourcesServer`` made from its config fields.

NeMo Gym runs each server in a process of its own, and its HTTP client is one per process,
bound to the event loop it is first used on. Servers that call one another in one test
process (an Environment Server, an agent) must therefore share a loop: each gets its own
port, all run on the thread's loop, and the client is closed on that loop at the end.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import uvicorn

__all__ = ["Servers", "resources_server"]


class Servers:
    """``apps`` (name -> ASGI app) served on 127.0.0.1; ``urls[name]`` once entered."""

    def __init__(self, apps: dict[str, Any]) -> None:
        self._servers = {
            name: uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                                log_level="warning", access_log=False))
            for name, app in apps.items()
        }
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()),
                                        name="nemo-gym-servers", daemon=True)
        self.urls: dict[str, str] = {}

    async def _serve(self) -> None:
        try:
            await asyncio.gather(*(server.serve() for server in self._servers.values()))
        finally:
            from nemo_gym.server_utils import (
                get_global_aiohttp_client,
                is_global_aiohttp_client_setup,
            )

            if is_global_aiohttp_client_setup():  # closed on the loop it runs on
                await get_global_aiohttp_client().close()

    def __enter__(self) -> Servers:
        self._thread.start()
        deadline = time.monotonic() + 30
        idle = threading.Event()
        while not all(server.started for server in self._servers.values()):
            # polled, bounded: uvicorn sets a flag only (as ors_gym's UvicornThread does)
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the NeMo Gym test servers did not start; see the log")
            idle.wait(0.005)
        for name, server in self._servers.items():
            host, port = server.servers[0].sockets[0].getsockname()[:2]
            self.urls[name] = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        for server in self._servers.values():
            server.should_exit = True
        self._thread.join(timeout=30)


def resources_server(client: Any = None, **config: Any) -> Any:
    """An ``OrsResourcesServer`` named ``ors`` (config fields as keywords), with NeMo Gym's
    ``ServerClient`` ``client`` (one of its own when None)."""
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    from ors_gym.nemo_gym import OrsResourcesServer, OrsResourcesServerConfig

    cfg = OrsResourcesServerConfig(host="127.0.0.1", port=0, entrypoint="app.py", name="ors",
                                   **config)
    if client is None:
        client = ServerClient(head_server_config=BaseServerConfig(host="127.0.0.1", port=0),
                              global_config_dict=OmegaConf.create({}))
    return OrsResourcesServer(config=cfg, server_client=client)
