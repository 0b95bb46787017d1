"""A wrapper that keeps a secret out of reprs, logs and Gymnasium specs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

__all__ = ["EnvSpecRedactor", "Secret", "reveal"]


class Secret:
    """Holds a secret string; ``repr`` and ``str`` show ``***``, ``reveal()`` the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (self._value,))


def reveal(value: str | Secret | None) -> str | None:
    """The plain value of a ``Secret`` (or of a plain string)."""
    return value.reveal() if isinstance(value, Secret) else value


def with_domains(entry: Any, where: str) -> tuple[Any, tuple[str, ...] | None]:
    """A secret's entry as ``(value, allowed_domains)``: domains None for a plain value;
    ``(value, [domain, ...])`` checked, its domains a tuple. ``where`` names the secret in
    the error."""
    if not isinstance(entry, tuple | list):
        return entry, None
    if (len(entry) != 2 or not isinstance(entry[1], list | tuple)
            or not all(isinstance(d, str) and d for d in entry[1])):
        raise TypeError(
            f"{where}: give a value, or (value, allowed_domains) with "
            "allowed_domains a list of domain names such as ['api.example.com']"
        )
    return entry[0], tuple(entry[1])


def redact_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``kwargs`` with ``api_key``, ``secrets`` and ``env_overrides`` values
    wrapped in ``Secret``."""
    out = dict(kwargs)
    key = out.get("api_key")
    if key is not None and not isinstance(key, Secret):
        out["api_key"] = Secret(str(key))
    for name in ("secrets", "env_overrides"):
        secrets = out.get(name)
        if secrets:
            out[name] = {k: _wrapped(v) for k, v in dict(secrets).items()}
    return out


def _wrapped(value: Any) -> Any:
    """``value`` as a ``Secret``; a secret given with its allowed domains keeps them."""
    if isinstance(value, tuple | list) and len(value) == 2 and isinstance(value[1], list | tuple):
        return (_wrapped(value[0]), tuple(value[1]))
    return value if isinstance(value, Secret) else Secret(str(value))


class EnvSpecRedactor:
    """A descriptor for an env class's ``spec`` attribute: set to an ``EnvSpec``, it keeps
    a copy whose ``api_key``, ``secrets`` and ``env_overrides`` kwargs are ``Secret``, so no
    repr of the spec shows them."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = f"_redacted_{name}"

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        return None if obj is None else getattr(obj, self._attr, None)

    def __set__(self, obj: object, value: Any) -> None:
        if value is not None and getattr(value, "kwargs", None):
            value = replace(value, kwargs=redact_kwargs(value.kwargs))
        setattr(obj, self._attr, value)
