"""Serve SDK environments over HTTP: in a background thread, or in the foreground.

``serve_in_thread`` is what tests, notebooks and benchmarks use to get a real
ORS server on 127.0.0.1 with an ephemeral port; ``ors-gym serve`` uses
``serve_forever``. Both use the SDK's own ``Server`` under uvicorn; the SDK is loaded by
``ors_gym.backends.local._sdk`` (``load_environment_classes`` and
``quiet_sdk_logging`` are re-exported here for the apps and scripts).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from ors_gym.backends.local._sdk import (
    load_environment_classes,
    quiet_sdk_logging,
    require_sdk,
)

__all__ = ["ServerThread", "load_environment_classes", "quiet_sdk_logging", "serve_in_thread"]


class ServerThread:
    """An SDK ``Server`` under uvicorn in a daemon thread, on an ephemeral port.

    Use as a context manager; ``url`` is ``http://127.0.0.1:<port>`` once entered.
    Startup is awaited through uvicorn's ``started`` flag, not a sleep.
    """

    def __init__(
        self, environments: Sequence[str | type], host: str = "127.0.0.1", port: int = 0
    ) -> None:
        sdk = require_sdk()
        import uvicorn

        self.environments = load_environment_classes(environments)
        self.sdk_server = sdk.Server(list(self.environments))
        config = uvicorn.Config(
            self.sdk_server.app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_keep_alive=60,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="ors-server", daemon=True)
        self._started = threading.Event()
        self.url = ""

    def start(self) -> ServerThread:
        self._thread.start()
        # uvicorn sets `started` once bound and exposes no event: poll it, bounded.
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the ORS server failed to start; see its log above")
            if time.monotonic() > deadline:
                raise RuntimeError("the ORS server did not start within 30 s")
            self._started.wait(0.005)
        sock = self._server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve_in_thread(environments: Sequence[str | type], port: int = 0) -> ServerThread:
    """Start ``environments`` on 127.0.0.1 in a background thread; call ``stop()`` after."""
    return ServerThread(environments, port=port).start()


def serve_forever(environments: Sequence[str | type], host: str, port: int) -> None:
    """Serve in the foreground until interrupted; prints the URL once bound."""
    sdk = require_sdk()
    import uvicorn

    classes = load_environment_classes(environments)
    server = sdk.Server(classes)
    config = uvicorn.Config(
        server.app, host=host, port=port, log_level="warning", timeout_keep_alive=60
    )
    uv = uvicorn.Server(config)

    original_startup = uv.startup

    async def startup(sockets: Any = None) -> None:
        await original_startup(sockets)
        if uv.servers:
            bound = uv.servers[0].sockets[0].getsockname()
            names = ", ".join(c.__name__.lower() for c in classes)
            print(f"ors-gym: serving {names} at http://{bound[0]}:{bound[1]}", flush=True)

    uv.startup = startup  # type: ignore[method-assign]
    uv.run()
