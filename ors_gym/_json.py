"""The one JSON helper: how ors_gym turns the values Gym code hands around into JSON.

Actions, task specs and score-group candidates arrive holding numpy scalars and
arrays, pydantic models (protocol messages) and dataclasses. ``default`` is the
``json.dumps`` hook that turns those into JSON values; ``dumps`` is the compact
encoder the HTTP backend sends; ``plain`` is a lossy, never-failing copy for
records written to disk (anything else becomes its ``repr``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

__all__ = ["default", "dumps", "plain"]


def default(value: Any) -> Any:
    """``json.dumps``'s ``default``: numpy values as numbers and lists, models as dicts."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(payload: Any) -> bytes:
    """``payload`` as compact UTF-8 JSON; raises TypeError or ValueError for what JSON lacks."""
    return json.dumps(payload, default=default, separators=(",", ":")).encode("utf-8")


def plain(value: Any) -> Any:
    """A JSON-safe copy that never fails: what ``default`` cannot convert becomes its repr."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    try:
        converted = default(value)
    except TypeError:
        return repr(value)
    return converted if isinstance(converted, str | bool | int | float) else plain(converted)
