"""Temporary: the SDK's private names used by the in-process backend."""

from __future__ import annotations

import sys
from typing import Any

from ors_gym.backends import _introspection

install_introspection_cache = _introspection.install
enable_introspection_cache = _introspection.enable


def list_splits(cls: Any) -> list[Any]:
    return list(cls._list_splits_cached())


def supports_score_group(cls: Any) -> bool:
    return bool(cls._supports_score_group())


def quiet_loaded_sdk_loggers() -> None:
    from openreward.log_utils import _resolve_log_level

    level = _resolve_log_level()
    try:
        from structlog import make_filtering_bound_logger
    except ImportError:  # pragma: no cover - structlog is an SDK dependency
        return
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "openreward" or name.startswith("openreward.")):
            continue
        for attr, value in list(vars(module).items()):
            if not type(value).__name__.startswith("BoundLoggerFilteringAt"):
                continue
            try:
                if value.get_effective_level() >= level:
                    continue
                wrapper: Any = make_filtering_bound_logger(level)
                quiet = wrapper(value._logger, value._processors, value._context)
            except Exception:
                continue
            setattr(module, attr, quiet)
