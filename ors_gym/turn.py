"""The pure half of an ORS env's reset and step: what the calls add up to, sans-IO.

A step runs an action's tool calls in order and stops at the first that
finishes the episode; what to run next depends on the results so far, but
turning results into ``(obs, reward, terminated, truncated, info)`` needs no
I/O. ``Turn`` holds that logic sans-IO: the caller asks ``next_call()``, runs
the call however it likes (blocking, or awaited among many sessions on one
event loop), hands back the result with ``record()`` (or the failure with
``fail()``), and ends with ``finish()``. ``reset_result`` builds a reset's
first observation and info from the prompt and the task's tools.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym._agent_errors import explain
from ors_gym.actions import AssistantTurn, ToolCall
from ors_gym.errors import (
    OrsActionError,
    OrsConnectionError,
    OrsError,
    OrsProtocolError,
    OrsServerError,
    OrsSessionExpired,
    OrsTimeoutError,
    OrsToolError,
)
from ors_gym.observations import DEFAULT_MAX_PIXELS, decode_blocks, observation_and_notes
from ors_gym.protocol import (
    Block,
    CallResult,
    ListToolsOutput,
    RunToolError,
    RunToolSuccess,
    TextBlock,
)
from ors_gym.settings import EnvSettings

__all__ = [
    "NUDGE_TEXT",
    "RECOVERABLE",
    "Elapsed",
    "Step",
    "Turn",
    "reset_result",
    "truncation_reason",
]

NUDGE_TEXT = (
    "No tool was called. Act by calling one of the available tools: {tools}. "
    'Write a call as {{"name": "<tool>", "arguments": {{...}}}}.'
)

#: What a step returns: ``(observation, reward, terminated, truncated, info)``.
Step = tuple[dict[str, Any], float, bool, bool, dict[str, Any]]

#: Failures that end an episode (``on_error="truncate"``) rather than the program.
RECOVERABLE: tuple[type[OrsError], ...] = (
    OrsConnectionError,
    OrsSessionExpired,
    OrsServerError,
    OrsToolError,
    OrsProtocolError,
)


class Elapsed(float):
    """A duration in seconds that compares equal to any other ``Elapsed``.

    Timings are measurements, not part of an episode's content: two identical
    steps must have equal infos (Gymnasium's ``check_env`` compares them). As
    every ``Elapsed`` equals every other, all share one hash (equal values must
    hash alike), so a set or dict key holds at most one of them.
    """

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Elapsed)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, Elapsed)

    def __hash__(self) -> int:
        return hash(Elapsed)


class Turn:
    """One step of one session, sans-IO: which calls to run, and what they add up to.

    ``steps`` counts this step (1 for the first step of an episode). Every call the
    turn runs has an id (the model's, else ``call_<steps>_<i>``), written into its
    record (``info["calls"][i]["id"]``) so that results are tied to calls by id; a
    plain message routed to the terminal tool answers no call (its id is None). Raises
    OrsActionError at construction when the action has no tool calls, the env
    has no terminal tool and the policy is ``"error"``.
    """

    def __init__(
        self,
        parsed: AssistantTurn,
        rules: EnvSettings,
        tools: ListToolsOutput,
        *,
        steps: int,
        env_name: str | None = None,
    ) -> None:
        self.rules = rules
        self.tools = tools
        self.steps = steps
        self.blocks: list[Block] = []
        self.calls: list[dict[str, Any]] = []
        self.reward = 0.0
        self.terminated = False
        self.truncated = False
        self.info: dict[str, Any] = {"calls": self.calls}
        self.failure: OrsError | None = None  # the infrastructure failure that ended it
        self.parsed = parsed
        self._routed = False  # a plain message went to the terminal tool: it answers no call
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
        index = self._next
        self._next += 1
        record = call_record(call, result, Elapsed(seconds), self.rules.error_reward, self.tools)
        if self._routed:
            record["id"] = None
        elif record["id"] is None:
            record["id"] = f"call_{self.steps}_{index}"  # as actions.call_id gives it
        self.calls.append(record)
        self.reward += record["reward"]
        if len(self._queue) > 1:
            self.blocks.append(TextBlock(text=f"[{call.name}]"))
        self.blocks.extend(record["blocks"])
        if record["finished"] or record["error_reason"] == "episode_finished":
            # A call after the end keeps saying so: terminated stays True (Gymnasium's
            # contract), the text says the episode has finished.
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
        self.failure = exc
        reason = truncation_reason(exc)
        self.info["truncation_reason"] = reason
        self.info["error"] = str(exc)
        self.blocks.append(TextBlock(text=f"The episode ended: {exc}"))
        return reason == "session_lost"

    def finish(self) -> Step:
        """The step's ``(observation, reward, terminated, truncated, info)``."""
        rules, info, calls = self.rules, self.info, self.calls
        reward = self.reward
        if self.parsed.errors and not calls:
            info.setdefault("error_reason", "parse_error")
            reward += rules.error_reward * len(self.parsed.errors)
        for note in self._notes:
            self.blocks.append(TextBlock(text=note))
        for c in calls:
            if not c["ok"]:
                if c["error_reason"] is not None:
                    info["error_reason"] = c["error_reason"]
                break

        if (
            not self.terminated
            and not self.truncated
            and rules.max_steps is not None
            and self.steps >= rules.max_steps
        ):
            self.truncated = True
            info["truncation_reason"] = "max_steps"

        observation, notes = observation_and_notes(
            self.blocks, rules.image_size, rules.max_image_pixels
        )
        if notes:
            info["observation_notes"] = list(notes)
        info["blocks"] = self.blocks
        return observation, reward, self.terminated, self.truncated, info

    def _no_tool_calls(
        self, parsed: AssistantTurn, tools: ListToolsOutput, env_name: str | None
    ) -> list[ToolCall]:
        """The terminal-tool rule: a plain message goes to the terminal tool, else the policy."""
        terminal = tools.terminal_tool
        if terminal is not None:
            arguments = {} if terminal.arg is None else {terminal.arg: parsed.text}
            self._routed = True
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
    call: ToolCall, result: CallResult, seconds: Elapsed, error_reward: float,
    tools: ListToolsOutput,
) -> dict[str, Any]:
    """The ``info["calls"]`` entry of one tool call (with the call's own ``blocks`` and
    its ``id``, None for a plain message routed to the terminal tool).

    A failed call's blocks tell the agent what went wrong in words it can act on
    (``_agent_errors``); ``error`` keeps the server's own message.
    """
    if type(result) is not RunToolSuccess and isinstance(result, RunToolError):
        told = explain(call.name, result.error, result.reason, tools, call.arguments)
        return {
            "id": call.id,
            "name": call.name,
            "input": call.arguments,
            "ok": False,
            "reward": error_reward,
            "finished": False,
            "metadata": None,
            "error": result.error,
            "error_reason": result.reason or "error",
            "seconds": seconds,
            "blocks": [TextBlock(text=f"Error: {told}")],
        }
    out = result.output
    return {
        "id": call.id,
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
