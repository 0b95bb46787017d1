"""pydantic: a model built from already-valid field values, without validation.

``LocalBackend`` turns the SDK's validated models into the field-for-field
equal ``ors_gym.protocol`` ones on every call. ``model_construct`` would do,
but loops over the fields in Python; filling the instance's four slots
(``__dict__`` and pydantic's private ``__pydantic_fields_set__``,
``__pydantic_extra__`` and ``__pydantic_private__``) directly is what it
amounts to for these models. Outside ``VERIFIED``, or if ``BaseModel`` has
other slots, ``model_construct`` is used.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from ors_gym._compat._versions import note_fallback, version_of, within

__all__ = ["VERIFIED", "build_unvalidated"]

#: pydantic releases whose BaseModel is exactly the four slots filled here.
VERIFIED = ((2, 6), (3,))

_M = TypeVar("_M", bound=BaseModel)
_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
_PRIVATE = within("pydantic", *VERIFIED) and tuple(BaseModel.__slots__) == _SLOTS

_new = object.__new__
_set = object.__setattr__
_ALL_FIELDS: dict[type, set[str]] = {}
if _PRIVATE:  # the slots' own setters: no attribute lookup by name per model built
    _set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
    _set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
    _set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def build_unvalidated(cls: type[_M], data: dict[str, Any]) -> _M:
    """A ``cls`` instance whose fields are ``data``, every field counted as set.

    ``data`` must hold every field of ``cls``, already valid (taken from a
    validated model); nothing is checked. Inside ``VERIFIED`` the instance's
    ``__dict__`` is ``data`` itself; outside, a copy made by ``model_construct``.
    Meant for models without extra fields or private attributes (the protocol's).
    """
    fields = _ALL_FIELDS.get(cls)
    if fields is None:
        fields = _ALL_FIELDS[cls] = set(cls.model_fields)
    if not _PRIVATE:
        note_fallback(
            "pydantic BaseModel slots",
            f"pydantic {version_of('pydantic')} is outside the verified range {VERIFIED} "
            "or its BaseModel has other slots; models are built with model_construct",
        )
        return cls.model_construct(_fields_set=set(fields), **data)
    obj = _new(cls)
    _set(obj, "__dict__", data)
    _set_fields_set(obj, fields.copy())
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj
