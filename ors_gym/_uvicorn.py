"""An ASGI app under uvicorn, the ORS server's and the gateway's: in a daemon thread
(:class:`UvicornThread`), or in the foreground until interrupted (:func:`serve_forever`).

Binding port 0 gives an ephemeral port; ``url`` is the bound address once started.
Startup is awaited on uvicorn's own ``started`` flag (it exposes no event), bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["UvicornThread", "serve_forever"]


class UvicornThread:
    """``app`` served by uvicorn in a daemon thread named ``name``; a context manager
    whose ``url`` is ``http://host:port`` once entered. ``what`` names the server in
    the errors of a failed start."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str,
                 what: str, lifespan: Literal["on", "off"] = "on") -> None:
        import uvicorn

        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                access_log=False, lifespan=lifespan, timeout_keep_alive=60)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=name, daemon=True)
        self._what = what
        self.url = ""

    def start(self) -> UvicornThread:
        self._thread.start()
        deadline = time.monotonic() + 30
        idle = threading.Event()
        while not self._server.started:  # polled, bounded: uvicorn sets a flag only
            if not self._thread.is_alive():
                raise RuntimeError(f"the {self._what} failed to start; see its log above")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {self._what} did not start within 30 s")
            idle.wait(0.005)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> UvicornThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve_forever(app: Any, host: str, port: int, *, bound: Callable[[str, int], None],
                  access_log: bool = True) -> None:
    """Serve ``app`` in the foreground until interrupted; ``bound(host, port)`` is called
    once the socket is bound (port 0: the ephemeral port given), to say where.
    ``access_log=False`` spares a line a request (the gateway's turns)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                            access_log=access_log, timeout_keep_alive=60)
    server = uvicorn.Server(config)
    original = server.startup

    async def startup(sockets: Any = None) -> None:
        await original(sockets)
        if server.servers:
            address = server.servers[0].sockets[0].getsockname()
            bound(str(address[0]), int(address[1]))

    server.startup = startup  # type: ignore[method-assign]
    server.run()
