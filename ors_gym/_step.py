"""The pure half of an ORS env's reset and step, shared by ``OrsEnv`` and ``OrsVectorEnv``.

A step runs an action's tool calls in order and stops at the first that
finishes the episode; what to run next depends on the results so far, but
turning results into ``(obs, reward, terminated, truncated, info)`` needs no
I/O. ``Turn`` holds that logic sans-IO: the caller asks ``next_call()``, runs
the call however it likes (blocking, or awaited among many sessions on one
event loop), hands back the result with ``record()`` (or the failure with
``fail()``), and ends with ``finish()``. Reset likewise: ``choose_task`` picks
the task from the options, ``reset_result`` builds the first observation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from ors_gym.actions import ParsedAction, ToolCall
from ors_gym.errors import (
    OrsActionError,
    OrsConnectionError,
    OrsError,
    OrsProtocolError,
    OrsRequestError,
    OrsServerError,
    OrsSessionExpired,
    OrsTimeoutError,
    OrsToolError,
)
from ors_gym.observations import DEFAULT_MAX_PIXELS, decode_blocks
from ors_gym.protocol import Block, CallResult, ListToolsOutput, RunToolError, TextBlock

__all__ = [
    "NUDGE_TEXT",
    "RECOVERABLE",
    "RESET_OPTIONS",
    "Elapsed",
    "StepRules",
    "TaskSource",
    "Turn",
    "check_reset_options",
    "choose_task",
    "reset_result",
    "truncation_reason",
]

NoToolCallPolicy = Literal["nudge", "terminate", "truncate", "error"]

NUDGE_TEXT = (
    "No tool was called. Act by calling one of the available tools: {tools}. "
    'Write a call as {{"name": "<tool>", "arguments": {{...}}}}.'
)

#: Failures that end an episode (``on_error="truncate"``) rather than the program.
RECOVERABLE: tuple[type[OrsError], ...] = (
    OrsConnectionError,
    OrsSessionExpired,
    OrsServerError,
    OrsToolError,
    OrsProtocolError,
)

RESET_OPTIONS = frozenset({"task_spec", "index", "split"})


class Elapsed(float):
    """A duration in seconds that compares equal to any other ``Elapsed``.

    Timings are measurements, not part of an episode's content: two identical
    steps must have equal infos (Gymnasium's ``check_env`` compares them).
    """

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Elapsed)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, Elapsed)

    __hash__ = float.__hash__


@dataclass(frozen=True)
class StepRules:
    """The env settings a step's outcome depends on (see ``OrsEnv``'s arguments)."""

    no_tool_call: NoToolCallPolicy = "nudge"
    error_reward: float = 0.0
    image_size: tuple[int, int] | None = None
    max_image_pixels: int = DEFAULT_MAX_PIXELS
    max_calls_per_step: int = 16
    max_steps: int | None = None


class Turn:
    """One step of one session, sans-IO: which calls to run, and what they add up to.

    ``steps`` counts this step (1 for the first step of an episode). Raises
    OrsActionError at construction when the action has no tool calls, the env
    has no terminal tool and the policy is ``"error"``.
    """

    def __init__(
        self,
        parsed: ParsedAction,
        rules: StepRules,
        tools: ListToolsOutput,
        *,
        steps: int,
        env_name: str | None = None,
    ) -> None:
        self.rules = rules
        self.steps = steps
        self.blocks: list[Block] = []
        self.calls: list[dict[str, Any]] = []
        self.reward = 0.0
        self.terminated = False
        self.truncated = False
        self.info: dict[str, Any] = {"calls": self.calls}
        self._parsed = parsed
        self._notes = list(parsed.errors)
        self._done = False

        tool_calls = list(parsed.tool_calls)
        limit = rules.max_calls_per_step
        if len(tool_calls) > limit:
            self._notes.append(
                f"only the first {limit} of {len(tool_calls)} tool calls ran; "
                "make fewer calls per turn"
            )
            tool_calls = tool_calls[:limit]
        if not tool_calls and not parsed.errors:
            tool_calls = self._no_tool_calls(parsed, tools, env_name)
        self._queue = tool_calls
        self._next = 0

    @property
    def planned(self) -> int:
        """How many tool calls this step may run."""
        return len(self._queue)

    def next_call(self) -> ToolCall | None:
        """The next tool call to run, or None when the step is complete."""
        if self._done or self._next >= len(self._queue):
            return None
        return self._queue[self._next]

    def record(self, call: ToolCall, result: CallResult, seconds: float) -> dict[str, Any]:
        """Take the result of ``next_call()``; returns the call's record (``info["calls"]``)."""
        self._next += 1
        record = call_record(call, result, Elapsed(seconds), self.rules.error_reward)
        self.calls.append(record)
        self.reward += record["reward"]
        if len(self._queue) > 1:
            self.blocks.append(TextBlock(text=f"[{call.name}]"))
        self.blocks.extend(record["blocks"])
        if record["finished"]:
            self.terminated = True
            self._done = True
        return record

    def fail(self, exc: OrsError) -> bool:
        """End the episode (truncated) on a failed call; True if the session is lost.

        A lost session (connection, expiry) has nothing left to delete, and
        trying would wait on a dead server. A timed-out one is kept: the server
        is alive, and the next reset (or close) deletes it.
        """
        self._done = True
        self.truncated = True
        reason = truncation_reason(exc)
        self.info["truncation_reason"] = reason
        self.info["error"] = str(exc)
        self.blocks.append(TextBlock(text=f"The episode ended: {exc}"))
        return reason == "session_lost"

    def finish(self) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """The step's ``(observation, reward, terminated, truncated, info)``."""
        rules, info, calls = self.rules, self.info, self.calls
        reward = self.reward
        if self._parsed.errors and not calls:
            info.setdefault("error_reason", "parse_error")
            reward += rules.error_reward * len(self._parsed.errors)
        for note in self._notes:
            self.blocks.append(TextBlock(text=note))
        first_error = next((c["error_reason"] for c in calls if not c["ok"]), None)
        if first_error is not None:
            info["error_reason"] = first_error

        if (
            not self.terminated
            and not self.truncated
            and rules.max_steps is not None
            and self.steps >= rules.max_steps
        ):
            self.truncated = True
            info["truncation_reason"] = "max_steps"

        decoded = decode_blocks(
            self.blocks, image_size=rules.image_size, max_pixels=rules.max_image_pixels
        )
        if decoded.notes:
            info["observation_notes"] = list(decoded.notes)
        info["blocks"] = self.blocks
        return decoded.observation, reward, self.terminated, self.truncated, info

    def _no_tool_calls(
        self, parsed: ParsedAction, tools: ListToolsOutput, env_name: str | None
    ) -> list[ToolCall]:
        """The terminal-tool rule: a plain message goes to the terminal tool, else the policy."""
        terminal = tools.terminal_tool
        if terminal is not None:
            arguments = {} if terminal.arg is None else {terminal.arg: parsed.message}
            return [ToolCall(terminal.name, arguments)]
        policy = self.rules.no_tool_call
        if policy == "error":
            raise OrsActionError(
                "the action has no tool calls and this environment has no terminal tool; "
                "call one of its tools, or construct the env with no_tool_call='nudge'",
                env_name=env_name,
            )
        if policy == "nudge":
            names = ", ".join(t.name for t in tools.tools) or "(none)"
            text = NUDGE_TEXT.format(tools=names)
            self.reward = self.rules.error_reward
        else:
            text = "The episode ended: no tool was called."
            if policy == "terminate":
                self.terminated = True
            else:
                self.truncated = True
            self.info["truncation_reason" if self.truncated else "termination_reason"] = (
                "no_tool_call"
            )
        self.blocks.append(TextBlock(text=text))
        self.info["error_reason"] = "no_tool_call"
        return []


def truncation_reason(exc: OrsError) -> str:
    """Why an infrastructure failure ended the episode, for ``info["truncation_reason"]``."""
    if isinstance(exc, OrsTimeoutError):
        return "timeout"
    if isinstance(exc, OrsConnectionError | OrsSessionExpired):
        return "session_lost"
    return "server_error"


def call_record(
    call: ToolCall, result: CallResult, seconds: Elapsed, error_reward: float
) -> dict[str, Any]:
    """The ``info["calls"]`` entry of one tool call (with the call's own ``blocks``)."""
    if isinstance(result, RunToolError):
        return {
            "name": call.name,
            "input": call.arguments,
            "ok": False,
            "reward": error_reward,
            "finished": False,
            "metadata": None,
            "error": result.error,
            "error_reason": result.reason or "error",
            "seconds": seconds,
            "blocks": [TextBlock(text=f"Error: {result.error}")],
        }
    out = result.output
    return {
        "name": call.name,
        "input": call.arguments,
        "ok": True,
        "reward": float(out.reward) if out.reward is not None else 0.0,
        "finished": bool(out.finished),
        "metadata": out.metadata,
        "error": None,
        "error_reason": None,
        "seconds": seconds,
        "blocks": list(out.blocks),
    }


# -- reset --------------------------------------------------------------------------------


def check_reset_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` as a dict, or ValueError naming the unknown keys."""
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(
            f"reset options must be a dict such as {{'task_spec': {{...}}}}, "
            f"got {type(options).__name__}"
        )
    options = dict(options or {})
    unknown = set(options) - RESET_OPTIONS
    if unknown:
        raise ValueError(
            f"unknown reset option(s) {sorted(unknown)}; "
            "valid ones are 'task_spec', 'index' and 'split'"
        )
    return options


class TaskSource(Protocol):
    """What ``choose_task`` needs to know about an environment's tasks (``OrsEnv`` has it)."""

    @property
    def location(self) -> str: ...

    @property
    def env_name(self) -> str: ...

    def default_split(self) -> str: ...

    def num_tasks(self, split: str | None = None) -> int: ...

    def task(self, index: int, split: str | None = None) -> dict[str, Any]: ...


def choose_task(
    source: TaskSource, options: Mapping[str, Any], rng: np.random.Generator
) -> tuple[dict[str, Any], str | None, int | None]:
    """The task a reset opens: ``(task_spec, split, index)``.

    ``options["task_spec"]`` is used as given (split and index None); else task
    ``options["index"]`` of ``options["split"]`` (default split), or one drawn
    with ``rng``. The session is then created by split and index, the spec
    being only reported.
    """
    task_spec = options.get("task_spec")
    if task_spec is not None:
        if not isinstance(task_spec, Mapping):
            raise TypeError(
                f"reset option 'task_spec' must be a dict, got {type(task_spec).__name__}"
            )
        return dict(task_spec), None, None
    split = options.get("split") or source.default_split()
    if "index" in options:
        index = int(options["index"])
    else:
        count = source.num_tasks(split)
        if count <= 0:
            raise OrsRequestError(
                f"split {split!r} has no tasks; choose another with "
                "reset(options={'split': ...})",
                server=source.location,
                env_name=source.env_name,
            )
        index = int(rng.integers(count))
    return source.task(index, split), split, index


def reset_result(
    prompt: Sequence[Block],
    tools: ListToolsOutput,
    *,
    env_name: str,
    task_spec: Mapping[str, Any],
    split: str | None,
    index: int | None,
    session_id: str,
    image_size: tuple[int, int] | None = None,
    max_image_pixels: int = DEFAULT_MAX_PIXELS,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``(observation, info)`` a reset returns, from the prompt and the task's tools."""
    decoded = decode_blocks(prompt, image_size=image_size, max_pixels=max_image_pixels)
    info: dict[str, Any] = {
        "env_name": env_name,
        "task_spec": copy.deepcopy(dict(task_spec)),
        "split": split,
        "index": index,
        "session_id": session_id,
        "tools": [t.model_dump() for t in tools.tools],
        "terminal_tool": tools.terminal_tool.model_dump() if tools.terminal_tool else None,
        "blocks": list(prompt),
    }
    if decoded.notes:
        info["observation_notes"] = list(decoded.notes)
    return decoded.observation, info
