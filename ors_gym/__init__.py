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
from typing import TYPE_CHECKING, Any

from ors_gym import platform as _platform  # noqa: F401  (registers its preflight)
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


def __getattr__(name: str) -> Any:
    """Load an app's public name on first use (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


register_bundled()
