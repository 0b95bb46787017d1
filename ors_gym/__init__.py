"""ors_gym: every Open Reward Standard environment as a Gymnasium environment.

``import ors_gym`` registers ``ors/<Name>-v0`` for the bundled environments
and ``ors/Remote-v0`` for any server; ``OrsEnv`` is the environment itself,
``AsyncOrsEnv`` the same awaited (the core ``OrsEnv`` drives), and
``OrsVectorEnv`` a batch of them stepped concurrently on one event loop.
"""

from __future__ import annotations

from ors_gym.actions import ParsedAction, ToolCall, parse_action
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.backends.base import AsyncBackend, Backend
from ors_gym.backends.http import AsyncHttpBackend, HttpBackend
from ors_gym.backends.local import AsyncLocalBackend, LocalBackend
from ors_gym.catalog import Catalog
from ors_gym.env import OrsEnv, make_backend
from ors_gym.errors import (
    OrsActionError,
    OrsAuthError,
    OrsConnectionError,
    OrsDependencyError,
    OrsError,
    OrsHTTPError,
    OrsProtocolError,
    OrsRequestError,
    OrsServerError,
    OrsSessionExpired,
    OrsTimeoutError,
    OrsToolError,
)
from ors_gym.eval import aevaluate, evaluate
from ors_gym.formats import as_action, tools_as
from ors_gym.observations import decode_blocks
from ors_gym.registration import (
    register_bundled,
    register_class,
    register_hosted,
    register_server,
)
from ors_gym.secret import Secret
from ors_gym.settings import EnvSettings
from ors_gym.spaces import AnyImage, AnyText, ToolCallSpace
from ors_gym.turn import Elapsed
from ors_gym.vector import OrsVectorEnv, make_env_fns

__version__ = "0.1.0"

__all__ = [
    "AnyImage",
    "AnyText",
    "AsyncBackend",
    "AsyncHttpBackend",
    "AsyncLocalBackend",
    "AsyncOrsEnv",
    "Backend",
    "Catalog",
    "Elapsed",
    "EnvSettings",
    "HttpBackend",
    "LocalBackend",
    "OrsActionError",
    "OrsAuthError",
    "OrsConnectionError",
    "OrsDependencyError",
    "OrsEnv",
    "OrsError",
    "OrsHTTPError",
    "OrsProtocolError",
    "OrsRequestError",
    "OrsServerError",
    "OrsSessionExpired",
    "OrsTimeoutError",
    "OrsToolError",
    "OrsVectorEnv",
    "ParsedAction",
    "Secret",
    "ToolCall",
    "ToolCallSpace",
    "__version__",
    "aevaluate",
    "as_action",
    "decode_blocks",
    "evaluate",
    "make_backend",
    "make_env_fns",
    "parse_action",
    "register_bundled",
    "register_class",
    "register_hosted",
    "register_server",
    "tools_as",
]

register_bundled()
