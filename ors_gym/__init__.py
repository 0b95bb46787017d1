"""ors_gym: every Open Reward Standard environment as a Gymnasium environment.

``import ors_gym`` registers ``ors/<Name>-v0`` for the bundled environments
and ``ors/Remote-v0`` for any server; ``OrsEnv`` is the environment itself,
``AsyncOrsEnv`` the same awaited (the core ``OrsEnv`` drives), and
``OrsVectorEnv`` a batch of them stepped concurrently on one event loop.

The top level holds what a user needs; everything else lives in its own
module (errors in :mod:`ors_gym.errors`, record format in
:mod:`ors_gym.trajectories`, ...). Apps (``evaluate``, ``aevaluate``) load on
first use, so ``import ors_gym`` stays light: it imports no SDK and sets no
environment variable.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ors_gym.actions import ToolCall
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.backends.http import AsyncHttpBackend, HttpBackend
from ors_gym.backends.local import AsyncLocalBackend, LocalBackend
from ors_gym.env import OrsEnv
from ors_gym.errors import OrsError
from ors_gym.registration import (
    register_bundled,
    register_class,
    register_hosted,
    register_server,
)
from ors_gym.secret import Secret
from ors_gym.settings import EnvSettings
from ors_gym.spaces import AnyImage, AnyText, ToolCallSpace
from ors_gym.vector import OrsVectorEnv

if TYPE_CHECKING:
    from ors_gym.eval import aevaluate, evaluate

__version__ = "0.1.0"

__all__ = [
    "AnyImage",
    "AnyText",
    "AsyncHttpBackend",
    "AsyncLocalBackend",
    "AsyncOrsEnv",
    "EnvSettings",
    "HttpBackend",
    "LocalBackend",
    "OrsEnv",
    "OrsError",
    "OrsVectorEnv",
    "Secret",
    "ToolCall",
    "ToolCallSpace",
    "__version__",
    "aevaluate",
    "evaluate",
    "register_bundled",
    "register_class",
    "register_hosted",
    "register_server",
]

#: Public names loaded on first access (apps with their own dependencies).
_LAZY: dict[str, str] = {
    "aevaluate": "ors_gym.eval",
    "evaluate": "ors_gym.eval",
}

#: Names the top level exported before it kept only what a user needs: still importable
#: from ``ors_gym`` for one release, with a ``DeprecationWarning`` naming their home.
_MOVED: dict[str, str] = {
    "AsyncBackend": "ors_gym.backends.base",
    "Backend": "ors_gym.backends.base",
    "Catalog": "ors_gym.catalog",
    "Elapsed": "ors_gym.turn",
    "OrsActionError": "ors_gym.errors",
    "OrsAuthError": "ors_gym.errors",
    "OrsConnectionError": "ors_gym.errors",
    "OrsDependencyError": "ors_gym.errors",
    "OrsHTTPError": "ors_gym.errors",
    "OrsProtocolError": "ors_gym.errors",
    "OrsRequestError": "ors_gym.errors",
    "OrsServerError": "ors_gym.errors",
    "OrsSessionExpired": "ors_gym.errors",
    "OrsTimeoutError": "ors_gym.errors",
    "OrsToolError": "ors_gym.errors",
    "ParsedAction": "ors_gym.actions",
    "as_action": "ors_gym.formats",
    "decode_blocks": "ors_gym.observations",
    "make_backend": "ors_gym.env",
    "make_env_fns": "ors_gym.vector",
    "parse_action": "ors_gym.actions",
    "tools_as": "ors_gym.formats",
}


def __getattr__(name: str) -> Any:
    """Load an app's public name on first use; resolve a moved name with a warning (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _MOVED:
        home = _MOVED[name]
        warnings.warn(
            f"ors_gym.{name} is no longer a top-level name; import it from {home} "
            f"(from {home} import {name}); the top-level alias goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


register_bundled()
