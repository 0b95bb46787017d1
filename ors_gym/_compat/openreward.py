"""The openreward SDK's private names: introspection cache, log level, split cache, score_group.

Inside ``VERIFIED`` (and while each name is there) the SDK's own private path
is used; otherwise a public one that gives the same answer, or, for the
introspection cache, none (tool calls run uncached). Importing this module
does not import the SDK.

The introspection cache. The SDK's dispatch resolves a tool's type hints and
signature on every call (``openreward.environments.environment._introspect_tool``:
``inspect.unwrap``, ``typing.get_type_hints``, ``inspect.signature``), twice
per call; that is about three quarters of its time on a small tool. The answer
is a pure function of the tool's function, so ``LocalBackend`` computes it once
per function and reuses it.

Scope. The hook replaces the SDK's module-level ``_introspect_tool`` (where it
imports it: ``environment`` and ``session``) with one that answers from the
cache only inside a ``LocalBackend`` call: ``enable_introspection_cache()``
sets a context variable in that call's own asyncio Task. Everything else, an
SDK ``Server`` in the same process included, runs the SDK's own function
unchanged. An SDK without ``_introspect_tool``, or outside ``VERIFIED``, is
left alone and runs uncached (``introspection_cache_installed()`` says which).

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
import importlib
import logging
import os
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ors_gym._compat import structlog as _structlog
from ors_gym._compat._versions import note_fallback, version_of, within

__all__ = [
    "VERIFIED",
    "enable_introspection_cache",
    "install_introspection_cache",
    "introspection_cache_installed",
    "list_splits",
    "own_caches",
    "quiet_loaded_sdk_loggers",
    "supports_score_group",
]

#: SDK releases whose private names below were read and tested (0.1.160 and 0.1.167).
VERIFIED = ((0, 1, 160), (0, 1, 168))


def _verified(what: str, consequence: str) -> bool:
    """Whether the installed SDK is in ``VERIFIED``; notes ``what`` falls back if not."""
    if within("openreward", *VERIFIED):
        return True
    note_fallback(
        what,
        f"openreward {version_of('openreward')} is outside the verified range {VERIFIED}; "
        + consequence,
    )
    return False


# -- the introspection cache ---------------------------------------------------------------

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


def enable_introspection_cache() -> None:
    """Answer from the cache for the rest of the current context (one Task: one call)."""
    _ENABLED.set(True)


def introspection_cache_installed() -> bool:
    """Whether the hook is in place (a verified SDK with the function it replaces)."""
    return _original is not None


def install_introspection_cache() -> bool:
    """Put the hook in place once; returns ``introspection_cache_installed()``.

    Needs the SDK imported.
    """
    global _original
    if _original is not None:
        return True
    what = "openreward _introspect_tool cache"
    if not _verified(what, "tool calls run uncached"):
        return False
    environment = sys.modules.get(_MODULES[0])
    original = getattr(environment, "_introspect_tool", None)
    if not callable(original):
        note_fallback(what, "the openreward SDK has no _introspect_tool; tool calls run uncached")
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


# -- the SDK's loggers ---------------------------------------------------------------------


def _log_level_from_environment() -> int:
    """The level the SDK reads: ``OPENREWARD_LOG_LEVEL``, else ``LOG_LEVEL``, else INFO."""
    raw = os.environ.get("OPENREWARD_LOG_LEVEL") or os.environ.get("LOG_LEVEL") or "INFO"
    return getattr(logging, raw.upper(), logging.INFO)


def _sdk_log_level() -> int:
    """``openreward.log_utils._resolve_log_level()``, or the same rule read here."""
    what = "openreward.log_utils._resolve_log_level"
    if _verified(what, "the log level is read from the environment here"):
        try:
            resolve = importlib.import_module("openreward.log_utils")._resolve_log_level
        except (ImportError, AttributeError):
            note_fallback(what, "the openreward SDK has no log_utils._resolve_log_level")
        else:
            return resolve()
    return _log_level_from_environment()


def quiet_loaded_sdk_loggers() -> None:
    """Raise SDK loggers made before ``OPENREWARD_LOG_LEVEL`` was set to that level.

    The SDK builds each module's structlog logger at import, filtering at the
    level the environment named then (INFO by default: one stdout line per
    tool call). If the user imported the SDK before ors_gym set the variable,
    those loggers are swapped for equal ones filtering at the level now
    configured. Only ever quieter: a level the user chose explicitly stands.
    """
    level = _sdk_log_level()
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "openreward" or name.startswith("openreward.")):
            continue
        for attr, value in list(vars(module).items()):
            if not _structlog.is_filtering_logger(value):
                continue
            try:
                if value.get_effective_level() >= level:
                    continue
            except Exception:  # a look-alike that is not a structlog logger
                continue
            quiet = _structlog.refiltered(value, level)
            if quiet is not None:
                setattr(module, attr, quiet)


# -- Environment classmethods --------------------------------------------------------------


def list_splits(cls: Any) -> Sequence[Any]:
    """``cls.list_splits()``, cached on the class as the SDK ``Server`` caches it.

    The SDK's ``_list_splits_cached()`` inside ``VERIFIED``; otherwise
    ``list_splits()`` itself, called each time.
    """
    what = "openreward Environment._list_splits_cached"
    if _verified(what, "list_splits() is called each time"):
        cached = getattr(cls, "_list_splits_cached", None)
        if callable(cached):
            return cached()
        note_fallback(what, "the openreward SDK has no Environment._list_splits_cached")
    return cls.list_splits()


#: The SDK's per-class caches, set on first use with ``hasattr`` (so a subclass reads its
#: parent's once the parent filled them): split list, task lists and their locks.
_CLASS_CACHES = ("_splits_cache", "_tasks_cache", "_tasks_cache_locks")


def own_caches(cls: Any) -> None:
    """Give ``cls`` caches of its own where it would read a base class's.

    The SDK caches ``list_splits()`` and ``list_tasks()`` on the class the first time,
    through ``hasattr``: a subclass that overrides them would be served its base's splits
    and tasks once the base filled its caches, before or after the subclass is loaded.
    Inside ``VERIFIED`` a class gets caches of its own when it is loaded (empty task
    caches; its splits asked now, as the SDK ``Server`` asks them at start-up); outside
    it nothing is done (the SDK's names may differ there).
    """
    if not _verified("openreward Environment's class caches", "a subclass may read its "
                     "base class's cached tasks"):
        return
    for name in _CLASS_CACHES:
        if name in vars(cls):
            continue
        if name != "_splits_cache":
            setattr(cls, name, {})
            continue
        try:
            setattr(cls, name, cls.list_splits())
        except Exception:  # the SDK's own start-up check says what is wrong, later
            if hasattr(cls, name):  # not the base's splits, at least
                setattr(cls, name, ())


def supports_score_group(cls: Any) -> bool:
    """Whether the environment class overrides ``score_group`` (the SDK's rule for a 404)."""
    what = "openreward Environment._supports_score_group"
    if _verified(what, "score_group is compared with Environment's here"):
        supports = getattr(cls, "_supports_score_group", None)
        if callable(supports):
            return bool(supports())
        note_fallback(what, "the openreward SDK has no Environment._supports_score_group")
    from openreward.environments import Environment

    return cls.score_group is not Environment.score_group
