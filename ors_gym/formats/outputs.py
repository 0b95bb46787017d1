"""A model client's raw output read as the action ``OrsEnv.step`` takes.

Model APIs return an assistant turn in their own shape: an OpenAI chat
message or completion, Anthropic content blocks or a message, OpenAI
Responses output items or a response, or the SDK objects of those clients.
:func:`as_action` turns any of them into the text/tool-call action that
:func:`ors_gym.actions.parse_action` reads; :func:`assistant_turn` reads it as
the :class:`~ors_gym.actions.AssistantTurn` the env's step runs as it is, keeping
the reasoning and giving every call an id, for recording the conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ors_gym.actions import AssistantTurn, call_id, parse_action
from ors_gym.errors import OrsActionError
from ors_gym.families import check_tool_format, parse_text
from ors_gym.formats.shapes import TEXT_TYPES, as_plain, reasoning_text
from ors_gym.protocol import ReasoningBlock

__all__ = ["AssistantTurn", "as_action", "assistant_turn", "call_id", "parse_output"]

logger = logging.getLogger("ors_gym")

_CALL_TYPES = frozenset({"tool_use", "function_call", "function"})
_CONTENT_TYPES = TEXT_TYPES | frozenset(
    {"thinking", "redacted_thinking", "reasoning", "message", "refusal", "tool_call"}
)


def as_action(output: Any) -> Any:
    """A model client's raw output as an action ``parse_action`` accepts.

    Reads OpenAI chat messages (``{"role": "assistant", "content", "tool_calls"}``)
    and completions (``{"choices": [...]}``), Anthropic content-block lists and
    messages (text, thinking, ``tool_use``), OpenAI Responses output lists and
    responses (``message``, ``reasoning``, ``function_call`` items), ORS
    assistant messages, and the SDK objects of those clients (via
    ``model_dump``). Anything else (text, call dicts) is returned unchanged.
    """
    return _split_output(output)[0]


def parse_output(
    output: Any, tool_format: str | None = None, tools: Callable[[], Any] | None = None
) -> AssistantTurn:
    """A model's output as tool calls: raw completion text by ``tool_format``'s family
    rules (``tools()`` gives the schemas its parameters are typed by), else
    :func:`~ors_gym.actions.parse_action` of :func:`as_action`."""
    return _parse(_split_output(output)[0], tool_format, tools)


def _parse(
    action: Any, tool_format: str | None, tools: Callable[[], Any] | None
) -> AssistantTurn:
    """The turn an action (as ``as_action`` gives it) reads as."""
    if tool_format is None or not isinstance(action, str):
        return parse_action(action)
    return parse_text(check_tool_format(tool_format), action, tools() if tools else None)


def assistant_turn(
    output: Any,
    *,
    step: int,
    tool_format: str | None = None,
    tools: Callable[[], Any] | None = None,
) -> AssistantTurn:
    """Parse a model's output (any shape :func:`as_action` reads) as turn ``step``, each
    call with an id (the model's, else :func:`~ors_gym.actions.call_id`); raw text by
    ``tool_format``'s rules (see :func:`parse_output`). Pass the turn to ``OrsEnv.step``.

    Raises :class:`~ors_gym.errors.OrsActionError` for a structurally invalid
    action, as ``OrsEnv.step`` would.
    """
    action, reasoning = _split_output(output)
    turn = _parse(action, tool_format, tools).numbered(step)
    if reasoning:
        turn = replace(turn, reasoning=(*reasoning, *turn.reasoning))
    return turn


def _split_output(output: Any) -> tuple[Any, list[ReasoningBlock]]:
    """(action, reasoning) for a raw model output; unknown shapes pass through."""
    if type(output) is dict and not ("role" in output or "choices" in output
                                     or "output" in output):
        return output, []  # an action dict already (the usual case), without the ABC checks
    output = as_plain(output)
    if isinstance(output, Mapping):
        choices = output.get("choices")
        if "role" not in output and isinstance(choices, list | tuple) and choices:
            first = as_plain(choices[0])
            message = first.get("message") if isinstance(first, Mapping) else None
            if message is not None:
                return _split_output(message)
        items = output.get("output")
        if "role" not in output and "name" not in output and isinstance(items, list | tuple):
            return _split_items(items)
        if output.get("role") == "assistant":
            return _split_message(output)
        return output, []
    if isinstance(output, list | tuple) and any(
        isinstance(item, Mapping) and item.get("type") in _CONTENT_TYPES
        for item in map(as_plain, output)
    ):
        return _split_items(output)
    return output, []


def _split_message(message: Mapping[str, Any]) -> tuple[Any, list[ReasoningBlock]]:
    """An assistant message: OpenAI chat, Anthropic, or ORS (``blocks``)."""
    texts: list[str] = []
    calls: list[Any] = []
    reasoning: list[ReasoningBlock] = []
    content = message.get("content")
    if content is None and "blocks" in message:
        content = message["blocks"]
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list | tuple):
        _collect_items(content, texts, calls, reasoning)
    elif content is not None:
        raise OrsActionError(
            f"the assistant message's content must be a str or a list of content blocks, "
            f"got {type(content).__name__}"
        )
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list | tuple):
        calls.extend(as_plain(c) for c in tool_calls)
    elif tool_calls is not None:
        raise OrsActionError(
            f"the assistant message's tool_calls must be a list, got {type(tool_calls).__name__}"
        )
    legacy = message.get("function_call")  # OpenAI's pre-tools field
    if isinstance(legacy, Mapping):
        calls.append({"type": "function", "function": dict(legacy)})
    for key in ("reasoning_content", "reasoning"):  # OpenAI-compatible servers' reasoning
        if isinstance(message.get(key), str) and message[key]:
            reasoning.append(ReasoningBlock(text=message[key]))
    return _action(texts, calls), reasoning


def _split_items(items: Sequence[Any]) -> tuple[Any, list[ReasoningBlock]]:
    texts: list[str] = []
    calls: list[Any] = []
    reasoning: list[ReasoningBlock] = []
    _collect_items(items, texts, calls, reasoning)
    return _action(texts, calls), reasoning


def _action(texts: list[str], calls: list[Any]) -> Any:
    """Native calls with the text as message; without calls the text itself, so
    calls the model wrote into its text (``<tool_call>`` tags, JSON) still parse."""
    text = "\n".join(t for t in texts if t)
    if calls:
        return {"tool_calls": calls, "message": text}
    return text


def _collect_items(
    items: Iterable[Any], texts: list[str], calls: list[Any], reasoning: list[ReasoningBlock]
) -> None:
    for raw in items:
        item = as_plain(raw)
        if isinstance(item, str):
            texts.append(item)
            continue
        if not isinstance(item, Mapping):
            calls.append(item)  # parse_action names what is wrong with it
            continue
        kind = item.get("type")
        if kind in TEXT_TYPES:
            texts.append(str(item.get("text") or ""))
        elif kind == "refusal":
            texts.append(str(item.get("refusal") or ""))
        elif kind == "thinking":
            thought = str(item.get("thinking") or "")
            reasoning.append(ReasoningBlock(text=thought, signature=item.get("signature")))
        elif kind == "reasoning":
            reasoning.append(ReasoningBlock(text=reasoning_text(item)))
        elif kind == "message":  # an OpenAI Responses output message
            inner = item.get("content")
            if isinstance(inner, str):
                texts.append(inner)
            elif isinstance(inner, list | tuple):
                _collect_items(inner, texts, calls, reasoning)
        elif kind == "tool_call":  # an ORS ToolCallBlock
            calls.append({"name": item.get("name"), "arguments": item.get("input"),
                          "id": item.get("id")})
        elif kind in _CALL_TYPES or "name" in item or "function" in item:
            calls.append(item)
        elif kind == "redacted_thinking":
            continue
        else:
            logger.debug("ignoring model output item of type %r", kind)
