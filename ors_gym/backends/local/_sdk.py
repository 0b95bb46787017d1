"""The ``openreward`` SDK, imported on first use, and the checks its ``Server`` makes.

``import ors_gym.backends.local`` works without the SDK; the first in-process
backend imports it (quietly: its per-call logs are set to ERROR unless
``OPENREWARD_LOG_LEVEL`` says otherwise) and installs the tool-introspection
cache that ``_session.dispatch`` turns on inside its own calls.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ors_gym._compat import openreward as _sdk_compat

__all__ = ["load_sdk", "sdk", "validate"]

#: The SDK's names this package uses, once loaded (``load_sdk``).
sdk: Any = None


def load_sdk() -> Any:
    """Import the SDK once, quietly, and bring already-imported SDK loggers to the chosen level."""
    global sdk
    from ors_gym.serving import _require_sdk, quiet_sdk_logging

    quiet_sdk_logging()
    if sdk is None:
        environments = _require_sdk()  # raises OrsDependencyError naming the `local` extra
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
