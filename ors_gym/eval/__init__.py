"""Evaluate a chat model on an ORS environment: ``ors_gym.eval.evaluate`` (``ors-gym eval``).

- :mod:`~ors_gym.eval.run`: :func:`evaluate` / :func:`aevaluate`, N episodes, K at once;
- :mod:`~ors_gym.eval.models`: the OpenAI-compatible endpoint client and ``ScriptedLLM``;
- :mod:`~ors_gym.eval.record`: episode records in the ``RecordTrajectories`` format;
- :mod:`~ors_gym.eval.summary`: the run's figures and their text table.
"""

from __future__ import annotations

from ors_gym.eval.models import (
    SCRIPTED,
    ChatModel,
    ModelEndpointError,
    ModelReply,
    OpenAIChatModel,
    ScriptedChatModel,
)
from ors_gym.eval.run import aevaluate, evaluate, make_model
from ors_gym.eval.summary import format_summary, mean_interval, summarize

__all__ = [
    "SCRIPTED",
    "ChatModel",
    "ModelEndpointError",
    "ModelReply",
    "OpenAIChatModel",
    "ScriptedChatModel",
    "aevaluate",
    "evaluate",
    "format_summary",
    "make_model",
    "mean_interval",
    "summarize",
]
