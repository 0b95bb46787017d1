"""Reaching the server, and opening and closing one ORS session per rollout.

Everything goes through ors_gym's HTTP backend; the ``openreward`` SDK is never
needed (verifiers cannot share an environment with it). One backend per connection
and process serves every rollout; its keepalive pings the sessions it opened.
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import SecretStr

from ors_gym.backends.http import AsyncHttpBackend, HttpBackend
from ors_gym.errors import OrsConnectionError, OrsError
from ors_gym.protocol import ListToolsOutput
from ors_gym.verifiers.config import OrsTasksetConfig
from ors_gym.verifiers.state import OrsConnection, OrsState

__all__ = [
    "close_backends",
    "close_session",
    "connection_of",
    "discover",
    "episode_sessions",
    "open_session",
    "shared_backend",
]

logger = logging.getLogger("ors_gym.verifiers")

_BACKENDS: dict[tuple[Any, ...], AsyncHttpBackend] = {}
#: The sessions opened during one episode (set by ``OrsSingleAgentEnv.run``), so the episode
#: can delete whatever its rollouts left open: verifiers skips ``finalize`` on a failed rollout.
_EPISODE: contextvars.ContextVar[dict[str, OrsConnection] | None] = contextvars.ContextVar(
    "ors_gym_verifiers_episode", default=None
)


def connection_of(config: OrsTasksetConfig, *, with_key: bool = True) -> OrsConnection:
    """The taskset config's server, with the hosted API key read from ``api_key_var``."""
    config.check()
    key = None
    if with_key and config.deployment is not None:
        value = os.environ.get(config.api_key_var, "")
        if not value:
            raise ValueError(
                f"deployment {config.deployment!r} needs an API key: set the environment "
                f"variable {config.api_key_var} (or name another with --env.taskset.api-key-var)"
            )
        key = SecretStr(value)
    return OrsConnection(base_url=config.base_url, deployment=config.deployment,
                         variant=config.variant, api_key=key, timeout=config.timeout)


def _backend_kwargs(conn: OrsConnection) -> dict[str, Any]:
    return {
        "deployment": conn.deployment,
        "variant": conn.variant,
        "api_key": None if conn.api_key is None else conn.api_key.get_secret_value(),
        "timeout": conn.timeout,
    }


def discover(config: OrsTasksetConfig) -> tuple[str, str, int]:
    """The environment's name, the split to use and its number of tasks.

    Raises ``OrsConnectionError`` naming the URL when the server does not answer, before
    any rollout starts.
    """
    conn = connection_of(config)
    with HttpBackend(conn.base_url, keepalive_interval=None, **_backend_kwargs(conn)) as backend:
        if conn.base_url is not None:
            try:
                backend.probe()
            except OrsError as exc:
                raise OrsConnectionError(
                    f"{exc.message} (--env.taskset.base-url {conn.base_url})",
                    server=conn.base_url,
                ) from None
        names = backend.list_environments()
        if config.env_name is not None:
            name = config.env_name.lower()
            if name not in names:
                raise OrsError(
                    f"no environment {config.env_name!r} at {conn.location}; it serves "
                    f"{', '.join(names) or 'none'} (--env.taskset.env-name)",
                    server=conn.location,
                )
        elif conn.variant is not None:
            name = conn.variant.lower()
        elif names:
            name = names[0]
        else:
            raise OrsError(f"{conn.location} lists no environments", server=conn.location)
        splits = [split.name for split in backend.splits(name)]
        if config.split is not None:
            if config.split not in splits:
                raise OrsError(
                    f"environment {name!r} has no split {config.split!r}; its splits are "
                    f"{', '.join(splits) or 'none'} (--env.taskset.split)",
                    server=conn.location, env_name=name,
                )
            split = config.split
        elif "train" in splits:
            split = "train"
        elif splits:
            split = splits[0]
        else:
            raise OrsError(f"environment {name!r} lists no splits", server=conn.location)
        return name, split, backend.num_tasks(name, split)


def shared_backend(conn: OrsConnection, *, keepalive: bool = True) -> AsyncHttpBackend:
    """This process's backend for ``conn`` (made on first use)."""
    key = (*conn.key(), keepalive)
    backend = _BACKENDS.get(key)
    if backend is None:
        backend = AsyncHttpBackend(conn.base_url, keepalive_interval=30.0 if keepalive else None,
                                   **_backend_kwargs(conn))
        _BACKENDS[key] = backend
    return backend


async def close_backends() -> None:
    """Close this process's backends, deleting any session still open."""
    backends = list(_BACKENDS.values())
    _BACKENDS.clear()
    for backend in backends:
        try:
            await backend.aclose()
        except OrsError as exc:
            logger.warning("closing the ORS backend for %s failed: %s", backend.location, exc)


def _tool_list(tools: ListToolsOutput) -> list[dict[str, Any]]:
    hidden = None if tools.terminal_tool is None else tools.terminal_tool.name
    return [
        {"name": spec.name, "description": spec.description or None,
         "input_schema": spec.input_schema or {"type": "object", "properties": {}}}
        for spec in tools.tools if spec.name != hidden
    ]


async def open_session(state: OrsState, conn: OrsConnection, env_name: str, split: str,
                       index: int) -> list[Any]:
    """Open the rollout's session into ``state``; returns the prompt as ORS messages.

    The session is registered with the running episode (if any) before anything else
    can fail, so the episode deletes it whatever happens next.
    """
    backend = shared_backend(conn)
    state.connection, state.env_name = conn, env_name
    state.session_id = await backend.create_session(env_name, split=split, index=index)
    episode = _EPISODE.get()
    if episode is not None:
        episode[state.session_id] = conn
    messages = await backend.messages(env_name, state.session_id)
    tools = await backend.task_tools(env_name, state.session_id)
    state.tools = _tool_list(tools)
    terminal = tools.terminal_tool
    state.terminal_tool = None if terminal is None else {"name": terminal.name,
                                                          "arg": terminal.arg}
    return messages


async def close_session(conn: OrsConnection, sid: str | None) -> None:
    """Delete session ``sid`` (best effort: a failure is logged at WARNING)."""
    if sid is None:
        return
    episode = _EPISODE.get()
    if episode is not None:
        episode.pop(sid, None)
    try:
        await shared_backend(conn).delete_session(sid)
    except OrsError as exc:
        logger.warning("could not delete ORS session %s at %s: %s", sid, conn.location, exc)


@contextmanager
def episode_sessions() -> Iterator[dict[str, OrsConnection]]:
    """Collect the sessions one episode's rollouts open and have not closed yet."""
    opened: dict[str, OrsConnection] = {}
    token = _EPISODE.set(opened)
    try:
        yield opened
    finally:
        _EPISODE.reset(token)
