"""The one JSON helper: how ors_gym turns the values Gym code hands around into JSON.

Actions, task specs and score-group candidates arrive holding numpy scalars and
arrays, pydantic models (protocol messages) and dataclasses. ``default`` is the
``json.dumps`` hook that turns those into JSON values; ``dumps`` is the compact
encoder the HTTP backend sends; ``plain`` is a lossy, never-failing copy for
records written to disk (anything else becomes its ``repr``). ``jsonable_object``
is the strict copy of an action's Python-built arguments (what JSON lacks is refused,
naming where), and ``json_type`` names a value's JSON type for the agent's error notes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np

from ors_gym.errors import OrsActionError

__all__ = [
    "JSON_SCALARS", "default", "dumps", "json_type", "jsonable_object", "plain",
]

_MAX_DEPTH = 200  # nesting limit for Python-built values


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


JSON_SCALARS = frozenset({str, bool, int, float, type(None)})


def jsonable_object(args: Mapping[Any, Any], where: str) -> dict[str, Any]:
    """A plain JSON copy of Python-built arguments (numpy values become Python ones)."""
    if all(type(k) is str and type(v) in JSON_SCALARS for k, v in args.items()):
        return dict(args)  # the common flat case, without walking it (a hot path)
    value = _jsonable(args, where, 0)
    assert isinstance(value, dict)
    return value


def _jsonable(value: Any, where: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise OrsActionError(f"{where} is nested more than {_MAX_DEPTH} levels deep.")
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, np.generic):
        return _jsonable(value.item(), where, depth + 1)
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist(), where, depth + 1)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise OrsActionError(
                    f"{where} has a non-str key {k!r}; JSON object keys must be str."
                )
            out[k] = _jsonable(v, f"{where}[{k!r}]", depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    raise OrsActionError(
        f"{where} holds a {type(value).__name__}, which is not JSON; use str, int, float, "
        "bool, None, list or dict values."
    )


#: JSON's name for a Python value's type (bool before int: a bool is an int too).
_JSON_TYPES = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"),
               (list, "an array"), (dict, "an object"))


def json_type(value: Any) -> str:
    """JSON's name for ``value``'s type ("an object", "null"...), else its Python name."""
    if value is None:
        return "null"
    kinds = (name for kind, name in _JSON_TYPES if isinstance(value, kind))
    return next(kinds, type(value).__name__)
