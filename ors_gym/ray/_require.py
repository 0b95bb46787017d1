"""Import Ray, or say how to install it (``ors_gym.ray`` imports Ray only when used)."""

from __future__ import annotations

import importlib
from typing import Any

from ors_gym.errors import OrsDependencyError

__all__ = ["require"]


def require(module: str = "ray") -> Any:
    """``import module`` (``ray``, ``ray.tune.registry``...), or OrsDependencyError."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise OrsDependencyError(
            f"ors_gym.ray needs Ray with RLlib ({module} could not be imported: {exc}); "
            "pip install 'ors-gym[ray]'"
        ) from exc
