"""ORS turns and tinker-cookbook's renderer messages, each way.

tinker-cookbook's renderer parses a completion into an assistant ``Message``
(text and thinking parts, ``tool_calls`` as its ``ToolCall`` objects with JSON
string arguments, ``unparsed_tool_calls``). That parse is the one the env
gets: the calls go to it as calls (a :class:`~ors_gym.actions.AssistantTurn`),
never back through text, the thinking never reaches it, and a call the parser
could not read reaches the agent as the env's error note. The env's reply
comes back as the renderer's ``tool`` and ``user`` messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.actions import AssistantTurn, ToolCall, call_id
from ors_gym.formats import StepExchange, exchange_messages
from ors_gym.protocol import Message as OrsMessage
from ors_gym.tokens.chat import chat_messages

__all__ = [
    "assistant_action",
    "opening_messages",
    "policy_version",
    "reply_messages",
    "sees_images",
    "tool_specs",
]

#: The longest stretch of an unreadable call quoted back to the agent.
_QUOTE = 300


def tool_specs(openai_tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function-calling tools as tinker-cookbook's ``ToolSpec`` dicts."""
    specs = []
    for tool in openai_tools:
        fn = tool.get("function", tool)
        specs.append(
            {
                "name": str(fn["name"]),
                "description": str(fn.get("description") or ""),
                "parameters": dict(fn.get("parameters") or {"type": "object", "properties": {}}),
            }
        )
    return specs


def opening_messages(
    renderer: Any,
    opening: Sequence[OrsMessage],
    tools: list[dict[str, Any]],
    system_prompt: str | None,
) -> list[dict[str, Any]]:
    """The task's opening turns as renderer messages, led by the renderer's own system
    message declaring ``tools`` (the task's system text, if any, goes in it)."""
    chat = chat_messages(opening, multimodal=sees_images(renderer))
    system = [system_prompt] if system_prompt else []
    while chat and chat[0]["role"] == "system":
        system.append(str(chat.pop(0)["content"]))
    text = "\n\n".join(s for s in system if s)
    if tools:
        prefix = list(renderer.create_conversation_prefix_with_tools(tools, text))
    else:
        prefix = [{"role": "system", "content": text}] if text else []
    return [*prefix, *chat]


def assistant_action(message: Mapping[str, Any], step: int) -> tuple[AssistantTurn, dict[str, Any]]:
    """The parsed assistant ``message`` as the env's turn (calls with ids, reading errors),
    and the message as the conversation keeps it (its calls carrying those ids)."""
    text = _text(message.get("content"))
    calls: list[ToolCall] = []
    errors: list[str] = []
    kept_calls = []
    for i, tc in enumerate(message.get("tool_calls") or ()):
        cid = tc.id or call_id(step, i)
        kept_calls.append(tc if tc.id else tc.model_copy(update={"id": cid}))
        try:
            arguments = json.loads(tc.function.arguments) if tc.function.arguments.strip() else {}
        except ValueError as exc:
            errors.append(_note(tc.function.name, f"its arguments are not JSON ({exc})",
                                tc.function.arguments))
            continue
        if not isinstance(arguments, dict):
            errors.append(_note(tc.function.name, "its arguments are not a JSON object",
                                tc.function.arguments))
            continue
        calls.append(ToolCall(tc.function.name, arguments, cid))
    for bad in message.get("unparsed_tool_calls") or ():
        errors.append(_note(None, bad.error, bad.raw_text))
    kept = dict(message)
    if kept_calls:
        kept["tool_calls"] = kept_calls
    return AssistantTurn(tuple(calls), text, tuple(errors)), kept


def sees_images(renderer: Any) -> bool:
    """Whether tinker-cookbook's renderer renders images (a vision renderer built with its
    image processor): it then gets them as image parts, else a note per image."""
    return getattr(renderer, "image_processor", None) is not None


def reply_messages(exchange: StepExchange, *, multimodal: bool = False) -> list[dict[str, Any]]:
    """The env's reply to a step as renderer messages: one ``tool`` message per call
    (with the call's id and name, its images inside it for a renderer that renders
    them), then a ``user`` message for anything else it said."""
    names = {tc.id: tc.name for tc in exchange.turn.tool_calls}
    out = chat_messages([exchange_messages(exchange)[1]], multimodal=multimodal)
    for msg in out:
        if msg["role"] == "tool" and msg.get("tool_call_id") in names:
            msg["name"] = names[msg["tool_call_id"]]
    return out


def _text(content: Any) -> str:
    """The text the env reads from a message's content: its text parts, not its thinking."""
    if isinstance(content, str):
        return content.strip()
    return "".join(p.get("text", "") for p in content or () if p.get("type") == "text").strip()


def _note(name: str | None, why: str, raw: str) -> str:
    what = f"The call to {name!r}" if name else "A tool call"
    quoted = raw if len(raw) <= _QUOTE else raw[:_QUOTE] + "..."
    return f"{what} could not be read: {why}. You wrote: {quoted}"


def policy_version(extra: Mapping[str, Any] | None) -> int | None:
    """The ``"policy_version"`` a sampler put in a step's ``ActionExtra`` (the version of the
    weights that sampled the turn), or None."""
    version = (extra or {}).get("policy_version")
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(
            f"extra['policy_version'] must be an int (the version of the weights that sampled "
            f"the turn) or None, got {version!r}"
        )
    return version
