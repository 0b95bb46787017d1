"""Serve SDK environments over HTTP: in a background thread, or in the foreground.

``serve_in_thread`` is what tests, notebooks and benchmarks use to get a real
ORS server on 127.0.0.1 with an ephemeral port; ``ors-gym serve`` uses
``serve_forever``. Both use the SDK's own ``Server`` under uvicorn.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ors_gym._compat.sse_starlette import exit_listener_per_loop
from ors_gym.errors import OrsDependencyError

__all__ = ["ServerThread", "load_environment_classes", "quiet_sdk_logging", "serve_in_thread"]


def quiet_sdk_logging(level: str = "ERROR") -> None:
    """SDK defaults, set just before ors_gym imports the SDK: no update check; only errors.

    The SDK logs every tool call at INFO and every agent mistake at WARNING: a line per
    step in a training loop. It reads its log level from ``OPENREWARD_LOG_LEVEL`` when
    it is imported and its update switch ``OPENREWARD_DISABLE_UPDATE_CHECK`` when a
    server starts, and offers no other public switch, so these two variables are set,
    only where the user has not set them, and only by the code that is about to import
    the SDK (serving, the in-process backend, a bundled class's first load), never by
    ``import ors_gym``. Set ``OPENREWARD_LOG_LEVEL`` yourself to see the SDK's lines.
    """
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("OPENREWARD_LOG_LEVEL", level)


def _require_sdk() -> Any:
    quiet_sdk_logging()
    try:
        import openreward.environments as sdk
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise OrsDependencyError(
            "the openreward SDK is needed to host or serve environments: "
            "pip install 'ors-gym[local]'"
        ) from exc
    exit_listener_per_loop()  # several servers in one process each stream SSE
    return sdk


def load_environment_classes(specs: Sequence[str | type]) -> list[type]:
    """Resolve ``module:Class`` strings (or classes) to SDK Environment classes."""
    import importlib

    sdk = _require_sdk()
    classes: list[type] = []
    for spec in specs:
        if isinstance(spec, str):
            module_name, sep, attr = spec.partition(":")
            if not sep or not module_name or not attr:
                raise ValueError(
                    f"environment {spec!r} is not of the form 'module:Class' "
                    "(for example 'ors_gym.envs.math:Math')"
                )
            try:
                cls = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                raise ValueError(f"cannot load environment {spec!r}: {exc}") from exc
        else:
            cls = spec
        if not (isinstance(cls, type) and issubclass(cls, sdk.Environment)):
            raise TypeError(
                f"{spec!r} is not a subclass of openreward.environments.Environment"
            )
        classes.append(cls)
    return classes


class ServerThread:
    """An SDK ``Server`` under uvicorn in a daemon thread, on an ephemeral port.

    Use as a context manager; ``url`` is ``http://127.0.0.1:<port>`` once entered.
    Startup is awaited through uvicorn's ``started`` flag, not a sleep.
    """

    def __init__(
        self, environments: Sequence[str | type], host: str = "127.0.0.1", port: int = 0
    ) -> None:
        sdk = _require_sdk()
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve_in_thread(environments: Sequence[str | type], port: int = 0) -> ServerThread:
    """Start ``environments`` on 127.0.0.1 in a background thread; call ``stop()`` after."""
    return ServerThread(environments, port=port).start()


def serve_forever(environments: Sequence[str | type], host: str, port: int) -> None:
    """Serve in the foreground until interrupted; prints the URL once bound."""
    sdk = _require_sdk()
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
