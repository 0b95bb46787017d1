"""ors_gym: every Open Reward Standard environment as a Gymnasium environment.

``import ors_gym`` registers ``ors/<Name>-v0`` for the bundled environments
and ``ors/Remote-v0`` for any server; ``OrsEnv`` is the environment itself.
"""

from __future__ import annotations

from ors_gym._secret import Secret
from ors_gym.actions import ParsedAction, ToolCall, parse_action
from ors_gym.backends.base import Backend
from ors_gym.env import Elapsed, OrsEnv, make_backend
from ors_gym.errors import (
    OrsActionError,
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
from ors_gym.observations import decode_blocks
from ors_gym.registration import register_bundled, register_server
from ors_gym.spaces import AnyImage, AnyText, ToolCallSpace

__version__ = "0.1.0"

__all__ = [
    "AnyImage",
    "AnyText",
    "Backend",
    "Elapsed",
    "OrsActionError",
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
    "ParsedAction",
    "Secret",
    "ToolCall",
    "ToolCallSpace",
    "__version__",
    "decode_blocks",
    "make_backend",
    "parse_action",
    "register_bundled",
    "register_server",
]

register_bundled()
