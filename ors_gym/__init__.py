"""ors_gym: every Open Reward Standard environment as a Gymnasium environment."""

from __future__ import annotations

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

__version__ = "0.1.0"

__all__ = [
    "OrsActionError",
    "OrsConnectionError",
    "OrsDependencyError",
    "OrsError",
    "OrsHTTPError",
    "OrsProtocolError",
    "OrsRequestError",
    "OrsServerError",
    "OrsSessionExpired",
    "OrsTimeoutError",
    "OrsToolError",
    "__version__",
]
