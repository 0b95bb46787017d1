"""ORS tools and turns in the formats LLM APIs use, and back.

An LLM harness around an ORS environment converts in four places:

- ``tools.py``: :func:`tools_as`, the session's tools as function-calling
  definitions for OpenAI chat, OpenAI Responses, Anthropic, or plain JSON Schema.
- ``outputs.py``: :func:`as_action` / :func:`assistant_turn`, a model client's
  raw output as an action ``OrsEnv.step`` takes (text, calls with ids, reasoning).
- ``exchange.py``: :func:`step_exchange` / :func:`exchange_messages`, one
  ``OrsEnv.step`` as ORS :class:`~ors_gym.protocol.Message` turns, each tool
  result tied to its call id.
- ``render.py`` / ``messages.py``: :func:`render_messages` writes ORS messages
  as OpenAI chat or Anthropic messages; :func:`to_ors_messages` reads them back.

``shapes.py`` holds what those share (text part types, SDK objects as dicts).
"""

from __future__ import annotations

from ors_gym.formats.exchange import (
    NOT_RUN_ENDED,
    NOT_RUN_ERROR,
    NOT_RUN_LIMIT,
    StepExchange,
    ToolResult,
    as_block,
    exchange_messages,
    step_exchange,
)
from ors_gym.formats.messages import to_ors_messages
from ors_gym.formats.outputs import (
    AssistantTurn,
    as_action,
    assistant_turn,
    call_id,
    parse_output,
)
from ors_gym.formats.render import MESSAGE_FORMATS, MessageFormat, render_messages
from ors_gym.formats.tools import TOOL_FORMATS, ToolFormat, tools_as

__all__ = [
    "MESSAGE_FORMATS",
    "NOT_RUN_ENDED",
    "NOT_RUN_ERROR",
    "NOT_RUN_LIMIT",
    "TOOL_FORMATS",
    "AssistantTurn",
    "MessageFormat",
    "StepExchange",
    "ToolFormat",
    "ToolResult",
    "as_action",
    "as_block",
    "assistant_turn",
    "call_id",
    "exchange_messages",
    "parse_output",
    "render_messages",
    "step_exchange",
    "to_ors_messages",
    "tools_as",
]
