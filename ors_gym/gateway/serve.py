"""The gateway under uvicorn: in a background thread (trainers, tests), or in the foreground.

:class:`GatewayThread` binds (port 0: an ephemeral one), sets ``gateway.url`` to
the bound address, so that :meth:`Gateway.open_session` gives full base URLs, and
stops on exit. :func:`serve_forever` is ``ors-gym gateway``'s loop.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ors_gym.gateway.gateway import Gateway

__all__ = ["GatewayThread", "serve", "serve_forever"]


class GatewayThread:
    """``gateway`` served by uvicorn in a daemon thread; a context manager whose ``url``
    is ``http://host:port`` once entered. Startup is awaited on uvicorn's own flag."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *,
                 admin_key: str | None = None) -> None:
        import uvicorn

        from ors_gym.gateway.app import build_app

        self.gateway = gateway
        app = build_app(gateway, admin_key=admin_key)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                access_log=False, lifespan="off", timeout_keep_alive=60)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="ors-gateway",
                                        daemon=True)
        self.url = ""

    def start(self) -> GatewayThread:
        self._thread.start()
        deadline = time.monotonic() + 30
        idle = threading.Event()
        while not self._server.started:  # uvicorn exposes a flag, no event: polled, bounded
            if not self._thread.is_alive():
                raise RuntimeError("the gateway failed to start; see its log above")
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start within 30 s")
            idle.wait(0.005)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        self.gateway.url = self.url
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> GatewayThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(gateway: Gateway, host: str = "127.0.0.1", port: int = 0) -> GatewayThread:
    """Start serving ``gateway`` in a background thread; ``stop()`` it after (or use
    ``with GatewayThread(gateway) as served:``)."""
    return GatewayThread(gateway, host, port).start()


def serve_forever(gateway: Gateway, host: str, port: int, *,
                  admin_key: str | None = None, public_url: str | None = None) -> None:
    """Serve in the foreground until interrupted; prints the address once bound."""
    import uvicorn

    from ors_gym.gateway.app import build_app

    config = uvicorn.Config(build_app(gateway, admin_key=admin_key), host=host, port=port,
                            log_level="warning", timeout_keep_alive=60)
    server = uvicorn.Server(config)
    original = server.startup

    async def startup(sockets: Any = None) -> None:
        await original(sockets)
        if server.servers:
            bound = server.servers[0].sockets[0].getsockname()
            gateway.url = public_url or f"http://{bound[0]}:{bound[1]}"
            print(f"ors-gym: gateway for {gateway.model} ({gateway.bridge.name}) at "
                  f"{gateway.url}", flush=True)

    server.startup = startup  # type: ignore[method-assign]
    server.run()
