"""The ``openreward`` SDK, loaded here and only here, and the checks its ``Server`` makes.

``import ors_gym`` works without the SDK. Whatever hosts or serves an
environment (the in-process backend, ``ors_gym.serving``, the bundled
classes' registration) loads it through this module: quietly (its per-call
logs set to ERROR unless ``OPENREWARD_LOG_LEVEL`` says otherwise), with a
clear error naming the ``local`` extra when it is missing. The in-process
backend also installs the tool-introspection cache that ``_session.dispatch``
turns on inside its own calls.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from ors_gym._compat import openreward as _sdk_compat
from ors_gym._compat.sse_starlette import exit_listener_per_loop
from ors_gym.errors import OrsDependencyError

__all__ = ["load_environment_classes", "load_sdk", "quiet_sdk_logging", "require_sdk", "sdk",
           "validate"]


def quiet_sdk_logging(level: str = "ERROR") -> None:
    """SDK defaults, set just before ors_gym imports the SDK: no update check; only errors.

    The SDK logs every tool call at INFO and every agent mistake at WARNING: a line per
    step in a training loop. It reads its log level from ``OPENREWARD_LOG_LEVEL`` when
    it is imported and its update switch ``OPENREWARD_DISABLE_UPDATE_CHECK`` when a
    server starts, and offers no other public switch, so these two variables are set,
    only where the user has not set them, and only by the code that is about to import
    the SDK (serving, the in-process backend, a bundled class's first load), never by
    ``import ors_gym``. Set ``OPENREWARD_LOG_LEVEL`` yourself to see the SDK's lines.
    """
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("OPENREWARD_LOG_LEVEL", level)


def require_sdk() -> Any:
    """``openreward.environments``, imported quietly; ``OrsDependencyError`` without it."""
    quiet_sdk_logging()
    try:
        import openreward.environments as environments
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise OrsDependencyError(
            "the openreward SDK is needed to host or serve environments: "
            "pip install 'ors-gym[local]'"
        ) from exc
    exit_listener_per_loop()  # several servers in one process each stream SSE
    return environments


def load_environment_classes(specs: Sequence[str | type]) -> list[type]:
    """Resolve ``module:Class`` strings (or classes) to SDK Environment classes."""
    environments = require_sdk()
    classes: list[type] = []
    for spec in specs:
        if isinstance(spec, str):
            module_name, sep, attr = spec.partition(":")
            if not sep or not module_name or not attr:
                raise ValueError(
                    f"environment {spec!r} is not of the form 'module:Class' "
                    "(for example 'ors_gym.envs.math:Math')"
                )
            try:
                cls = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                raise ValueError(f"cannot load environment {spec!r}: {exc}") from exc
        else:
            cls = spec
        if not (isinstance(cls, type) and issubclass(cls, environments.Environment)):
            raise TypeError(
                f"{spec!r} is not a subclass of openreward.environments.Environment"
            )
        _sdk_compat.own_caches(cls)
        classes.append(cls)
    return classes

def lazy_class(specs: Mapping[str, str], namespace: dict[str, Any], module: str,
               name: str) -> Any:
    """The class ``specs`` names ``name`` (``module:Class``), imported on first access and
    kept in ``namespace``: a package's PEP 562 ``__getattr__`` (the bundled environments)."""
    spec = specs.get(name)
    if spec is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    module_name, _, attr = spec.partition(":")
    quiet_sdk_logging()  # before the class's module imports the SDK, which reads it then
    cls = getattr(importlib.import_module(module_name), attr)
    namespace[name] = cls
    return cls


#: The SDK's names this package uses, once loaded (``load_sdk``).
sdk: Any = None


def load_sdk() -> Any:
    """Import the SDK once, quietly, and bring already-imported SDK loggers to the chosen level."""
    global sdk
    quiet_sdk_logging()
    if sdk is None:
        environments = require_sdk()  # raises OrsDependencyError naming the `local` extra
        from openreward.environments import session, types, utils

        sdk = SimpleNamespace(
            Environment=environments.Environment,
            TextBlock=types.TextBlock,
            ImageBlock=types.ImageBlock,
            GroupScore=types.GroupScore,
            ScoreGroup=types.ScoreGroup,
            call_session_tool=session.call_session_tool,
            list_session_tools=session.list_session_tools,
            run_user_callable=utils.run_user_callable,
        )
        _sdk_compat.install_introspection_cache()
    _sdk_compat.quiet_loaded_sdk_loggers()
    return sdk


def validate(key: str, cls: Any) -> None:
    """The checks the SDK ``Server`` makes at start-up, with its messages."""
    listed = cls.list_tools()
    if not listed.tools and listed.terminal_tool is None:
        raise ValueError(
            f"Environment '{key}' has no tools defined. Add at least one @tool method."
        )
    if not _sdk_compat.list_splits(cls):
        raise ValueError(
            f"Environment '{key}' has no splits defined. Implement list_splits() to return "
            "at least one split."
        )
    env_base = sdk.Environment
    if cls.get_prompt is env_base.get_prompt and cls.get_messages is env_base.get_messages:
        raise ValueError(
            f"Environment '{key}' implements neither get_prompt() nor get_messages(). "
            "Implement get_prompt() (or get_messages() for a conversation-shaped environment)."
        )
