"""The gateway under uvicorn: in a background thread (trainers, tests), or in the foreground.

:class:`GatewayThread` binds (port 0: an ephemeral one), sets ``gateway.url`` to
the bound address, so that :meth:`Gateway.open_session` gives full base URLs, and
stops on exit. :func:`serve_forever` is ``ors-gym gateway``'s loop.
"""

from __future__ import annotations

from ors_gym._uvicorn import UvicornThread
from ors_gym._uvicorn import serve_forever as forever
from ors_gym.gateway.gateway import Gateway

__all__ = ["GatewayThread", "serve", "serve_forever"]


class GatewayThread(UvicornThread):
    """``gateway`` served by uvicorn in a daemon thread; a context manager whose ``url``
    is ``http://host:port`` once entered. Startup is awaited on uvicorn's own flag."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *,
                 admin_key: str | None = None) -> None:
        from ors_gym.gateway.app import build_app

        self.gateway = gateway
        super().__init__(build_app(gateway, admin_key=admin_key), host, port,
                         name="ors-gateway", what="gateway", lifespan="off")

    def start(self) -> GatewayThread:
        super().start()
        self.gateway.url = self.url
        return self

    def __enter__(self) -> GatewayThread:
        return self.start()


def serve(gateway: Gateway, host: str = "127.0.0.1", port: int = 0) -> GatewayThread:
    """Start serving ``gateway`` in a background thread; ``stop()`` it after (or use
    ``with GatewayThread(gateway) as served:``)."""
    return GatewayThread(gateway, host, port).start()


def serve_forever(gateway: Gateway, host: str, port: int, *,
                  admin_key: str | None = None, public_url: str | None = None) -> None:
    """Serve in the foreground until interrupted; prints the address once bound."""
    from ors_gym.gateway.app import build_app

    def bound(host: str, port: int) -> None:
        gateway.url = public_url or f"http://{host}:{port}"
        print(f"ors-gym: gateway for {gateway.model} ({gateway.bridge.name}) at "
              f"{gateway.url}", flush=True)

    forever(build_app(gateway, admin_key=admin_key), host, port, bound=bound, access_log=False)
