"""Which backend an env talks to, decided in one place.

``OrsEnv``, ``AsyncOrsEnv`` and ``OrsVectorEnv`` all ask ``make_async_backend``
(``OrsEnv`` through ``make_backend``, the blocking face over the same async
backend): HTTP for a ``base_url`` or a hosted ``deployment``, else the SDK
class hosted in this process. HTTP wins when both are given, so
``gym.make("ors/GridWorld-v0", base_url=...)`` talks to a server instead of
hosting the bundled class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ors_gym.secret import reveal
from ors_gym.settings import EnvSettings

if TYPE_CHECKING:
    import httpx

    from ors_gym._runtime import Runtime
    from ors_gym.backends.base import AsyncBackend, Backend

__all__ = [
    "NO_ENVIRONMENT", "async_face_of", "make_async_backend", "make_async_backends", "make_backend",
]

NO_ENVIRONMENT = (
    "an ORS env needs an environment: pass base_url='http://host:port' for an ORS server, "
    "deployment='Namespace/name' for a hosted OpenReward environment, "
    "env_class=MyEnv (or 'module:Class') to host an SDK environment in this process, "
    "or use gym.make('ors/GridWorld-v0') for a bundled one"
)


def _uses_http(settings: EnvSettings, base_url: Any) -> bool:
    if base_url is not None and not isinstance(base_url, str):
        raise TypeError(
            f"base_url must be a str such as 'http://127.0.0.1:8000', got "
            f"{type(base_url).__name__} (OrsVectorEnv takes a list of them)"
        )
    return base_url is not None or settings.remote


def make_async_backend(
    settings: EnvSettings,
    *,
    base_url: str | None = None,
    env_class: Any = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncBackend:
    """The async backend for ``base_url`` or ``settings.deployment`` (HTTP, with
    ``settings.http``, sending through ``transport``, a shared ``pooled_transport()``, when
    given), else ``env_class`` (in-process)."""
    if _uses_http(settings, base_url):
        from ors_gym.backends.http import AsyncHttpBackend

        if settings.deployment is not None:  # refused now, as the SDK refuses, not per session
            from ors_gym.backends.http._codec import allowed_domains

            for key, entry in (settings.plain_secrets() or {}).items():
                allowed_domains(key, entry, hosted=True)
        # Errors name the options as an env's user sets them: gym.make(..., timeout=...).
        options = settings.http if transport is None else settings.http.replace(
            transport=transport)
        return AsyncHttpBackend(
            base_url, deployment=settings.deployment, variant=settings.variant,
            api_key=reveal(settings.api_key), options=options, _set_as="env",
        )
    if env_class is not None:
        from ors_gym.backends.local import AsyncLocalBackend

        return AsyncLocalBackend(env_class)
    raise ValueError(NO_ENVIRONMENT)


def make_async_backends(
    settings: EnvSettings, base_urls: Sequence[str], *, max_connections: int | None = None,
    idle_connections: int | None = None,
) -> tuple[list[AsyncBackend], Callable[[], Awaitable[None]]]:
    """One ``make_async_backend`` per URL, all over one shared connection pool (at most
    ``max_connections`` open, ``settings.http.max_connections_per_host`` to one server,
    ``idle_connections`` kept idle); and the coroutine function
    that closes the pool, to await after the backends' ``aclose``. A ``transport`` in
    ``settings.http`` is used instead of a pool (its owner closes it)."""
    from ors_gym.backends.http import pooled_transport

    if settings.http.transport is not None:
        async def _theirs() -> None:
            return None

        return [make_async_backend(settings, base_url=url) for url in base_urls], _theirs
    pool = pooled_transport(max_connections, idle_connections,
                         max_connections_per_host=settings.http.max_connections_per_host)
    backends = [make_async_backend(settings, base_url=url, transport=pool) for url in base_urls]
    return backends, pool.aclose


def make_backend(
    settings: EnvSettings | None = None,
    *,
    base_url: str | None = None,
    env_class: Any = None,
    **options: Any,
) -> Backend:
    """The blocking face (``HttpBackend`` or ``LocalBackend``) of ``make_async_backend``'s
    choice. ``options`` are the env options (``api_key``, ``timeout``, ...), or pass
    ``settings``."""
    settings = settings or EnvSettings.from_options(options)
    core = make_async_backend(settings, base_url=base_url, env_class=env_class)
    if _uses_http(settings, base_url):
        from ors_gym.backends.http import AsyncHttpBackend, HttpBackend

        assert isinstance(core, AsyncHttpBackend)
        return HttpBackend.over(core)
    from ors_gym.backends.local import AsyncLocalBackend, LocalBackend

    assert isinstance(core, AsyncLocalBackend)
    return LocalBackend.over(core)


def async_face_of(backend: Any) -> tuple[AsyncBackend, Runtime]:
    """The async backend behind a blocking one, and the runtime that drives it.

    ``HttpBackend`` and ``LocalBackend`` are faces over an async backend
    (``core``) and its ``runtime``: an env over one shares both, so every env
    over a shared backend runs on one loop. Any other blocking ``Backend``
    has its methods run in a worker thread each (``asyncio.to_thread``).
    """
    from ors_gym._runtime import Runtime

    core = getattr(backend, "core", None)
    runtime = getattr(backend, "runtime", None)
    if core is not None and isinstance(runtime, Runtime):
        return core, runtime
    return _Threaded(backend), Runtime("ors-env")


class _Threaded:
    """An ``AsyncBackend`` over a third-party blocking ``Backend``: each method runs in a
    worker thread, so the loop it is awaited on keeps going meanwhile."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.location: str = backend.location

    async def aclose(self) -> None:
        await asyncio.to_thread(self.backend.close)

    async def probe(self) -> None:
        probe = getattr(self.backend, "probe", None)
        if probe is not None:
            await asyncio.to_thread(probe)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.backend, name)
        if not callable(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(target, *args, **kwargs)

        call.__name__ = name
        return call

    def __repr__(self) -> str:
        return f"_Threaded({self.backend!r})"
