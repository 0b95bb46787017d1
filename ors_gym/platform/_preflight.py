"""The required-secrets preflight: one question before a hosted env opens any session.

A hosted environment whose constructor reads a secret the user did not pass
fails inside every session it opens, a thousand times over in a training
run. With ``check_secrets=True`` an env asks the platform once which secrets
the deployment needs (``GET .../required-secrets``, as the SDK's
``list_required_secrets``) and raises ``OrsRequestError`` naming the missing
ones before its first request: no session id is asked for. The answer is kept per API host and
deployment for the process, and concurrent first resets on one event loop
(a vector env's) share one request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ors_gym.errors import OrsRequestError
from ors_gym.secret import reveal

if TYPE_CHECKING:
    from ors_gym.settings import EnvSettings
from ors_gym.backends.http import API_KEY_VAR, platform_api_location

__all__ = ["check_required_secrets", "missing_secrets", "secrets_preflight"]

logger = logging.getLogger("ors_gym")

#: The names a session always carries when an API key is set (the SDK adds them).
KEY_SECRETS = ("api_key", "OPENREWARD_API_KEY")

_KNOWN: dict[tuple[str, str], tuple[str, ...]] = {}
_ASKING: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str], asyncio.Task[tuple[str, ...]]]
] = weakref.WeakKeyDictionary()


def missing_secrets(required: Iterable[str], given: Iterable[str]) -> list[str]:
    """The required names not among the given ones, in the platform's order."""
    have = set(given)
    return [name for name in required if name not in have]


async def _ask(deployment: str, api_key: str | None) -> tuple[str, ...]:
    from ors_gym.platform._client import AsyncPlatformClient

    async with AsyncPlatformClient(api_key=api_key) as client:
        return tuple(await client.required_secrets(deployment))


async def check_required_secrets(
    deployment: str, given: Iterable[str], api_key: str | None
) -> None:
    """Raise ``OrsRequestError`` naming the secrets ``deployment`` needs and ``given``
    lacks; the names are asked of the platform once per process."""
    location, _ = platform_api_location()
    key = (location, deployment)
    required = _KNOWN.get(key)
    if required is None:
        asking = _ASKING.setdefault(asyncio.get_running_loop(), {})
        task = asking.get(key)
        if task is None:
            task = asking[key] = asyncio.ensure_future(_ask(deployment, api_key))
            task.add_done_callback(lambda _t: asking.pop(key, None))
        required = await asyncio.shield(task)
        _KNOWN[key] = required
    names = list(given) + (list(KEY_SECRETS) if api_key else [])
    missing = missing_secrets(required, names)
    if missing:
        example = ", ".join(f"{name!r}: ..." for name in missing)
        raise OrsRequestError(
            f"{deployment} needs the secret(s) {', '.join(missing)}, which were not given; "
            f"pass secrets={{{example}}} (no session was opened)",
            server=location,
        )
    logger.debug("%s: every required secret is given (%d)", deployment, len(required))


async def secrets_preflight(settings: EnvSettings) -> None:
    """The check ``ors_gym.platform`` registers with ``ors_gym.settings.register_preflight``:
    for an env with ``check_secrets``, ``check_required_secrets`` before its first
    request (so before any session id is asked for)."""
    if settings.check_secrets and settings.deployment is not None:
        key = reveal(settings.api_key) or os.environ.get(API_KEY_VAR) or None
        await check_required_secrets(settings.deployment, settings.secrets or {}, key)
