"""Serve SDK environments over HTTP: in a background thread, or in the foreground.

``serve_in_thread`` is what tests, notebooks and benchmarks use to get a real
ORS server on 127.0.0.1 with an ephemeral port; ``ors-gym serve`` uses
``serve_forever``. Both use the SDK's own ``Server`` under uvicorn; the SDK is loaded by
``ors_gym.backends.local.sdk`` (``load_environment_classes`` and
``quiet_sdk_logging`` are re-exported here for the apps and scripts).
"""

from __future__ import annotations

from collections.abc import Sequence

from ors_gym._uvicorn import UvicornThread
from ors_gym._uvicorn import serve_forever as forever
from ors_gym.backends.local.sdk import (
    load_environment_classes,
    quiet_sdk_logging,
    require_sdk,
)

__all__ = ["ServerThread", "load_environment_classes", "quiet_sdk_logging", "serve_in_thread"]


class ServerThread(UvicornThread):
    """An SDK ``Server`` under uvicorn in a daemon thread, on an ephemeral port.

    Use as a context manager; ``url`` is ``http://127.0.0.1:<port>`` once entered.
    Startup is awaited through uvicorn's ``started`` flag, not a sleep.
    """

    def __init__(
        self, environments: Sequence[str | type], host: str = "127.0.0.1", port: int = 0
    ) -> None:
        sdk = require_sdk()
        self.environments = load_environment_classes(environments)
        self.sdk_server = sdk.Server(list(self.environments))
        super().__init__(self.sdk_server.app, host, port, name="ors-server",
                         what="ORS server")

    def start(self) -> ServerThread:
        super().start()
        return self

    def __enter__(self) -> ServerThread:
        return self.start()


def serve_in_thread(environments: Sequence[str | type], port: int = 0) -> ServerThread:
    """Start ``environments`` on 127.0.0.1 in a background thread; call ``stop()`` after."""
    return ServerThread(environments, port=port).start()


def serve_forever(environments: Sequence[str | type], host: str, port: int) -> None:
    """Serve in the foreground until interrupted; prints the URL once bound."""
    sdk = require_sdk()
    classes = load_environment_classes(environments)
    names = ", ".join(c.__name__.lower() for c in classes)

    def bound(host: str, port: int) -> None:
        print(f"ors-gym: serving {names} at http://{host}:{port}", flush=True)

    forever(sdk.Server(classes).app, host, port, bound=bound)
