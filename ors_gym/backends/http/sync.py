"""``HttpBackend``: the blocking face of ``AsyncHttpBackend``, on a ``Runtime``.

Every method runs the async backend's coroutine on the face's runtime
(``ors_gym._runtime``): its private loop, driven by the calling thread, so a
request costs no thread hop. The retries, resumes, errors and results are
``AsyncHttpBackend``'s, since they are its own methods. The keepalive task
that pings open sessions runs on the same loop, driven by the runtime's
background driver while no call is running, so sessions outlive a slow policy.

The backend pickles as its settings (worker processes); the loop, client and
sessions are made again on first use, also in a forked child.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from typing import Any

from ors_gym._runtime import Runtime, blocking
from ors_gym.backends.http._settings import SETUP_TIMEOUT_S
from ors_gym.backends.http.async_ import AsyncHttpBackend

__all__ = ["HttpBackend"]

_A = AsyncHttpBackend

#: Settings readable as attributes (``backend.timeout``), read from ``settings``.
_SETTING_ATTRIBUTES = frozenset({
    "timeout", "connect_timeout", "call_timeout", "max_retries", "backoff",
    "starting_ride_out", "max_response_bytes",
})


class HttpBackend:
    """Talks to an ORS server (``ors-gym serve``, an SDK ``Server``, a hosted gateway).

    ``timeout`` bounds each ordinary request and ``connect_timeout`` each
    connection attempt. ``call_timeout`` bounds one tool call end to end; None
    waits as long as the server keeps the stream alive with its pings.
    ``max_retries`` and ``backoff`` (seconds, doubled per retry) govern retries
    of 429, 502, 503 and 504 answers and dropped connections (a refused one
    fails at once: nothing listens); ``starting_ride_out`` is how long an
    environment whose ``setup()`` is still running is waited for.
    ``keepalive_interval`` is how often open sessions are pinged (None disables
    it), also while a slow ``/create``, ``/prompt`` or ``/messages`` runs: those
    wait up to ``setup_timeout`` for the environment's constructor, ``setup()``
    and prompt, as the SDK client waits. ``api_key`` is sent as ``X-API-Key``
    and never shown in logs, reprs or errors. These settings are read back
    from ``settings`` (also as attributes: ``backend.timeout``).

    A hosted environment: ``deployment="Namespace/name"`` (sent as
    ``X-Deployment``; sessions come from ``/create_session``), optionally
    ``variant`` (one environment class inside it; without it the server's
    first). ``base_url`` and ``api_key`` then default as in the SDK: the session
    host ``OPENREWARD_SESSION_URL``, else ``sessions.`` + ``OPENREWARD_URL``
    (default ``https://openreward.ai``), and ``OPENREWARD_API_KEY``. A missing
    or refused key raises ``OrsAuthError``.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        deployment: str | None = None,
        variant: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        call_timeout: float | None = None,
        max_retries: int = 5,
        backoff: float = 0.5,
        starting_ride_out: float = 600.0,
        setup_timeout: float = SETUP_TIMEOUT_S,
        keepalive_interval: float | None = 30.0,
        max_response_bytes: int = 64 * 1024 * 1024,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.core = AsyncHttpBackend(
            base_url, deployment=deployment, variant=variant, api_key=api_key,
            timeout=timeout, connect_timeout=connect_timeout, call_timeout=call_timeout,
            max_retries=max_retries, backoff=backoff, starting_ride_out=starting_ride_out,
            setup_timeout=setup_timeout, keepalive_interval=keepalive_interval,
            max_response_bytes=max_response_bytes, headers=headers,
        )
        self.runtime = Runtime("ors-http")
        self.location: str = self.core.location
        _LIVE.add(self)

    def __getstate__(self) -> dict[str, Any]:
        return {"core": self.core}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.core = state["core"]
        self.runtime = Runtime("ors-http")
        self.location = self.core.location
        _LIVE.add(self)

    def __repr__(self) -> str:
        return "HttpBackend" + repr(self.core).removeprefix("AsyncHttpBackend")

    def __enter__(self) -> HttpBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def settings(self) -> Any:
        """The validated HTTP settings (shared with the async backend)."""
        return self.core.settings

    @property
    def base_url(self) -> str:
        return self.core.base_url

    @property
    def headers(self) -> dict[str, str]:
        return self.core.headers

    @property
    def keepalive_interval(self) -> float | None:
        return self.core.keepalive_interval

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found normally: the settings read as attributes.
        if name in _SETTING_ATTRIBUTES:
            return getattr(self.core.settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def open_sessions(self) -> frozenset[str]:
        """Ids of the sessions this backend opened and has not deleted (kept alive)."""
        return self.core.open_sessions

    health = blocking(_A.health)
    probe = blocking(_A.probe)
    version = blocking(_A.version)
    list_environments = blocking(_A.list_environments)
    tools = blocking(_A.tools)
    splits = blocking(_A.splits)
    tasks = blocking(_A.tasks)
    num_tasks = blocking(_A.num_tasks)
    task = blocking(_A.task)
    task_range = blocking(_A.task_range)
    create_session = blocking(_A.create_session)
    prompt = blocking(_A.prompt)
    messages = blocking(_A.messages)
    task_tools = blocking(_A.task_tools)
    call = blocking(_A.call)
    score_group = blocking(_A.score_group)
    delete_session = blocking(_A.delete_session)
    ping = blocking(_A.ping)

    def close(self) -> None:
        """Delete open sessions (best effort), stop pinging, close connections and the loop.

        Safe to call twice; the backend stays usable and reconnects on next use.
        """
        self.runtime.close(self.core.aclose())

    def _forget_runtime(self) -> None:
        """In a forked child: the parent's loop, connections, sessions and keepalive task
        are not ours to use or close (the runtime abandons its loop by itself)."""
        self.core._init_runtime()


_LIVE: weakref.WeakSet[HttpBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(_LIVE):
        backend._forget_runtime()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
