"""Agents that run their own loop against the gateway, as users write them, and the
scripted "model" the stand-in backend answers with.

``openai_episode`` and ``anthropic_episode`` play one ORS episode (an ``OrsEnv``
wrapped by ``ors_gym.gateway.capture``): the environment's prompt and tools go to
the SDK in its own format, the SDK's reply is the step's action, and the step's tool
results go back as the SDK's tool messages, as a harness built on ``ors_gym.formats``
does. ``counter_model`` is the backend's script: it reads the Counter's target and
the counter's value from the prompt and increments towards the target, then answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ors_gym.formats import (
    assistant_turn,
    exchange_messages,
    render_messages,
    step_exchange,
)

TARGET = re.compile(r"Make it equal (-?\d+)")
VALUE = re.compile(r"The counter is (?:now |at )?(-?\d+)")


def counter_model(write: Callable[[tuple[tuple[str, dict[str, Any]], ...], str, str], Any],
                  ) -> Callable[[list[int], str], Any]:
    """A script for the stand-in backend: ``write(calls, content, think)`` is the reply
    in the tokenizer's family format (text or ids)."""

    def script(prompt_ids: list[int], text: str) -> Any:
        target = int(TARGET.findall(text)[-1])
        value = int(VALUE.findall(text)[-1])
        if value < target:
            step = min(5, target - value)
            return write((("increment", {"amount": step}),), "", f"{target - value} to go.")
        return write((), "Done.", "It is reached.")

    return script


def openai_message(stream: Any) -> dict[str, Any]:
    """A streamed chat completion put back together as the assistant message."""
    content, reasoning = "", ""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += getattr(delta, "reasoning_content", None) or ""
            for call in delta.tool_calls or ():
                slot = calls.setdefault(call.index, {"id": None, "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["function"]["name"] += call.function.name or ""
                    slot["function"]["arguments"] += call.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def openai_episode(env: Any, client: Any, *, task: dict[str, Any], stream: bool = False,
                   drop_reasoning: bool = False, reserialize: bool = False,
                   ) -> tuple[Any, dict[str, Any]]:
    """One Counter episode played by an OpenAI-SDK agent; (the trajectory, the reset info)."""
    _, reset_info = env.reset(options={"task_spec": task})
    core = env.unwrapped
    messages: list[dict[str, Any]] = render_messages(core.messages(), "openai")
    tools = core.tools_as("openai")
    for step in range(1, 20):
        if stream:
            message = openai_message(client.chat.completions.create(
                model="tiny", messages=messages, tools=tools, stream=True,
                stream_options={"include_usage": True}))
        else:
            reply = client.chat.completions.create(model="tiny", messages=messages, tools=tools)
            message = reply.choices[0].message.model_dump(exclude_none=True)
        turn = assistant_turn(message, step=step)
        echoed = dict(message)
        if drop_reasoning:
            echoed.pop("reasoning_content", None)
        if reserialize:
            for call in echoed.get("tool_calls") or ():
                args = json.loads(call["function"]["arguments"])
                call["function"]["arguments"] = json.dumps(args, separators=(",", ":"))
        messages.append(echoed)
        _, _, terminated, truncated, info = env.step(turn)
        if terminated or truncated:
            return info["trajectory"], reset_info
        reply_message = exchange_messages(step_exchange(turn, info))[1]
        messages += render_messages([reply_message], "openai")
    raise AssertionError("the episode did not end")


def anthropic_episode(env: Any, client: Any, *, task: dict[str, Any], stream: bool = False,
                      ) -> tuple[Any, dict[str, Any]]:
    """One Counter episode played by an Anthropic-SDK agent."""
    _, reset_info = env.reset(options={"task_spec": task})
    core = env.unwrapped
    messages: list[dict[str, Any]] = render_messages(core.messages(), "anthropic")
    tools = core.tools_as("anthropic")
    for step in range(1, 20):
        if stream:
            with client.messages.stream(model="tiny", max_tokens=256, messages=messages,
                                        tools=tools) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(model="tiny", max_tokens=256, messages=messages,
                                           tools=tools)
        turn = assistant_turn(reply, step=step)
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        _, _, terminated, truncated, info = env.step(turn)
        if terminated or truncated:
            return info["trajectory"], reset_info
        reply_message = exchange_messages(step_exchange(turn, info))[1]
        messages += render_messages([reply_message], "anthropic")
    raise AssertionError("the episode did not end")


def sampled_runs(row: Any) -> list[tuple[int, int]]:
    """(start, end) of each run of sampled ids (mask 1) in the row's completion."""
    runs, start = [], None
    for i, m in enumerate([*row.mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs
