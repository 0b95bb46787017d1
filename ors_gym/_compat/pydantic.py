"""Temporary: pydantic model construction without validation."""

from __future__ import annotations

from typing import Any, TypeVar

_T = TypeVar("_T")
_new = object.__new__
_set = object.__setattr__
_ALL_FIELDS: dict[type, set[str]] = {}


def build_unvalidated(cls: type[_T], data: dict[str, Any]) -> _T:
    fields = _ALL_FIELDS.get(cls)
    if fields is None:
        fields = _ALL_FIELDS[cls] = set(cls.model_fields)  # type: ignore[attr-defined]
    obj = _new(cls)
    _set(obj, "__dict__", data)
    _set(obj, "__pydantic_fields_set__", set(fields))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj
