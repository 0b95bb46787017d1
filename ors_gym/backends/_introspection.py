"""The SDK's per-call tool introspection, cached for the calls ``LocalBackend`` runs.

The SDK's dispatch resolves a tool's type hints and signature on every call
(``openreward.environments.environment._introspect_tool``: ``inspect.unwrap``,
``typing.get_type_hints``, ``inspect.signature``), twice per call; that is
about three quarters of its time on a small tool. The answer is a pure function of the tool's
function, so ``LocalBackend`` computes it once per function and reuses it.

Scope. The hook replaces the SDK's module-level ``_introspect_tool`` (where it
imports it: ``environment`` and ``session``) with one that answers from the
cache only inside a ``LocalBackend`` call: ``enable()`` sets a context
variable in that call's own asyncio Task. Everything else, an SDK ``Server``
in the same process included, runs the SDK's own function unchanged. An SDK
without ``_introspect_tool`` is left alone and runs uncached (``installed()``
says which).

Exactness. The cached value is what the SDK's function returned the first
time for that function: the same ``hints`` dict and ``params`` list. ``real``
(``inspect.unwrap(fn)``) is cached unless it is ``fn`` itself (a bound method
would keep its environment instance alive): then ``fn`` is returned, as
``inspect.unwrap`` would. Bound and plain functions are cached apart (a bound
method's signature drops its first parameter). Only a tool whose annotations
are changed at run time after its first call would see a stale answer.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["enable", "install", "installed"]

logger = logging.getLogger("ors_gym")

_ENABLED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ors_gym_cached_introspection", default=False
)
_MODULES = ("openreward.environments.environment", "openreward.environments.session")
_SAME = object()  # "real is fn itself" (inspect.unwrap found no __wrapped__)

_original: Callable[[Any], tuple[Any, dict[str, Any], list[Any]]] | None = None
#: (bound?) -> {underlying function: (real or _SAME, hints, params)}
_cache: dict[bool, weakref.WeakKeyDictionary[Any, tuple[Any, Any, Any]]] = {
    True: weakref.WeakKeyDictionary(),
    False: weakref.WeakKeyDictionary(),
}


def enable() -> None:
    """Answer from the cache for the rest of the current context (one Task: one call)."""
    _ENABLED.set(True)


def installed() -> bool:
    """Whether the hook is in place (the SDK has the function it replaces)."""
    return _original is not None


def install() -> bool:
    """Put the hook in place once; returns ``installed()``. Needs the SDK imported."""
    global _original
    if _original is not None:
        return True
    environment = sys.modules.get(_MODULES[0])
    original = getattr(environment, "_introspect_tool", None)
    if not callable(original):
        logger.debug("the openreward SDK has no _introspect_tool; tool calls run uncached")
        return False
    _original = original
    for name in _MODULES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "_introspect_tool", None) is original:
            module._introspect_tool = _introspect_tool  # type: ignore[attr-defined]
    return True


def _introspect_tool(fn: Callable[..., Any]) -> tuple[Any, dict[str, Any], list[Any]]:
    """The SDK's ``_introspect_tool``, from the cache inside a LocalBackend call."""
    original = _original
    assert original is not None
    if not _ENABLED.get():
        return original(fn)
    func = getattr(fn, "__func__", None)
    bound = func is not None
    key = func if bound else fn
    try:
        hit = _cache[bound].get(key)
    except TypeError:  # unhashable, or no weak references: not cached
        return original(fn)
    if hit is None:
        real, hints, params = original(fn)
        hit = (_SAME if real is fn else real, hints, params)  # never a strong ref to the key
        try:
            _cache[bound][key] = hit
        except TypeError:
            pass
        return real, hints, params
    real, hints, params = hit
    return (fn if real is _SAME else real), hints, params
