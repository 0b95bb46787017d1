"""The stand-in model's scripts for harness episodes, in the tiny tokenizer's Qwen3 format.

``counter_player`` plays the Counter: it reads the target from the task's prompt and the
counter's value from the last tool result, increments towards the target (its first turn
makes two calls at once, its ids split non-canonically, so only a verbatim record keeps
them), then calls ``done`` (or answers in plain text, for the terminal-tool rule), and
answers "Done." once the episode has ended. ``plain_answer`` never calls a tool.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from _tiny_lm import answer_text, encode, non_canonical, tool_call_text

TARGET = re.compile(r"Make it equal (-?\d+)")
VALUE = re.compile(r"The counter is (?:now |at )?(-?\d+)")
PREFIX = re.compile(r'"name": "(\w*?)increment"')
ENDED = ("Target reached", "episode has ended", "Correct!")


def counter_player(tok: Any, *, call_done: bool = True,
                   final: str = "final_answer") -> Callable[[list[int], str], Any]:
    """The Counter's player (see the module); ``final``: the tool a harness that ends
    on a tool call (smolagents) is told to call at the end, or "" for a plain answer."""

    def script(prompt_ids: list[int], text: str) -> Any:
        prefix = PREFIX.search(text)  # a harness may prefix the tools with their server
        increment, done = (f"{prefix.group(1) if prefix else ''}{n}" for n in ("increment",
                                                                                "done"))
        if any(mark in text for mark in ENDED):
            if final and f'"{final}"' in text:
                return _ids(tok, tool_call_text(final, {"answer": "Done."}))
            return _ids(tok, answer_text("Done.", think="It has ended."))
        target = int(TARGET.findall(text)[0])
        value = int(VALUE.findall(text)[-1])
        if value == 0 and target > 1:  # two calls in one turn: their ids differ from ORS's
            first, second = 1, min(5, target - 1)
            text = (tool_call_text(increment, {"amount": first}, think=f"{target} to go.")
                    + "\n" + tool_call_text(increment, {"amount": second}))
            return non_canonical(tok, _ids(tok, text))
        if value < target:
            step = min(5, target - value)
            return _ids(tok, tool_call_text(increment, {"amount": step},
                                            think=f"{target - value} to go."))
        if call_done:
            return _ids(tok, tool_call_text(done, {}, think="Reached."))
        return _ids(tok, answer_text(f"The counter is {value}.", think="Reached."))

    return script


def plain_answer(tok: Any, answer: str) -> Callable[[list[int], str], Any]:
    """A model that answers ``answer`` in plain text, calling no tool."""
    return lambda prompt_ids, text: _ids(tok, answer_text(answer, think="I know this."))


def _ids(tok: Any, text: str) -> list[int]:
    return [*encode(tok, text), tok.eos_token_id]
