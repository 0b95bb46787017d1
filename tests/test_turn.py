"""``ors_gym.turn.Turn``: a step's logic fed results by hand, with no backend and no I/O.

Each case builds a ``Turn`` from an action, hands it results the way a backend
would (``record``) or failures (``fail``), and checks what ``next_call`` asks for
and what ``finish`` makes of it, as ``tests/backends/http/`` tests ``Ops``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ors_gym.actions import ToolCall, parse_action
from ors_gym.errors import (
    OrsActionError,
    OrsConnectionError,
    OrsError,
    OrsServerError,
    OrsSessionExpired,
    OrsTimeoutError,
)
from ors_gym.protocol import (
    CallResult,
    ListToolsOutput,
    RunToolError,
    RunToolSuccess,
    TerminalToolSpec,
    TextBlock,
    ToolOutput,
    ToolSpec,
)
from ors_gym.settings import EnvSettings
from ors_gym.turn import NUDGE_TEXT, Elapsed, Turn, truncation_reason

TOOLS = ListToolsOutput(tools=[ToolSpec(name="add"), ToolSpec(name="look")])
WITH_ANSWER = ListToolsOutput(
    tools=[ToolSpec(name="add")], terminal_tool=TerminalToolSpec(name="answer", arg="text")
)


def ok(text: str, reward: float | None = None, finished: bool = False) -> RunToolSuccess:
    return RunToolSuccess(output=ToolOutput(blocks=[TextBlock(text=text)], reward=reward,
                                            finished=finished))


def refused(error: str, reason: str | None = None) -> RunToolError:
    return RunToolError(error=error, reason=reason)


def settings(**options: Any) -> EnvSettings:
    return EnvSettings.from_options(options)


def calls(*names: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "arguments": {"n": i}} for i, n in enumerate(names)]}


def drive(turn: Turn, results: list[CallResult | OrsError]) -> list[str]:
    """Feed ``results`` in order to the calls ``turn`` asks for; the names it asked for."""
    asked: list[str] = []
    for result in results:
        call = turn.next_call()
        if call is None:
            break
        asked.append(call.name)
        if isinstance(result, OrsError):
            turn.fail(result)
        else:
            turn.record(call, result, 0.25)
    return asked


@dataclass
class Case:
    name: str
    action: Any
    results: list[CallResult | OrsError]
    asked: list[str]
    text: str
    reward: float
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    tools: ListToolsOutput = field(default_factory=lambda: TOOLS)
    options: dict[str, Any] = field(default_factory=dict)
    steps: int = 1


CASES = [
    Case("one call", calls("add"), [ok("3", 1.0)], ["add"], "3", 1.0),
    Case("two calls: results labelled, rewards summed", calls("add", "look"),
         [ok("3", 1.0), ok("a room", 0.5)], ["add", "look"], "[add]\n3\n[look]\na room", 1.5),
    Case("a finishing call stops the rest", calls("add", "look"),
         [ok("done", 2.0, finished=True), ok("never")], ["add"], "[add]\ndone", 2.0,
         terminated=True),
    Case("a refused call: agent words, error reward, error_reason", calls("nosuch"),
         [refused("Unknown tool 'nosuch'", "not_found")], ["nosuch"],
         "Error: ", -1.0, info={"error_reason": "not_found"}, options={"error_reward": -1.0}),
    Case("a call after the episode ended keeps terminated", calls("add"),
         [refused("Episode finished", "episode_finished")], ["add"], "Error: ", 0.0,
         terminated=True, info={"error_reason": "episode_finished"}),
    Case("a lost session truncates and says why", calls("add", "look"),
         [OrsConnectionError("gone", server="s")], ["add"], "The episode ended: gone", 0.0,
         truncated=True, info={"truncation_reason": "session_lost"}),
    Case("a timeout truncates with reason timeout", calls("add"),
         [OrsTimeoutError("slow", server="s")], ["add"], "The episode ended: slow", 0.0,
         truncated=True, info={"truncation_reason": "timeout"}),
    Case("a plain message goes to the terminal tool", "my answer is 4",
         [ok("correct", 1.0, finished=True)], ["answer"], "correct", 1.0, terminated=True,
         tools=WITH_ANSWER),
    Case("no call, no terminal tool, nudge: a reminder and the error reward", "hi", [], [],
         NUDGE_TEXT.format(tools="add, look"), -0.5, info={"error_reason": "no_tool_call"},
         options={"no_tool_call": "nudge", "error_reward": -0.5}),
    Case("no call, terminate", "hi", [], [], "The episode ended: no tool was called.", 0.0,
         terminated=True, info={"termination_reason": "no_tool_call"},
         options={"no_tool_call": "terminate"}),
    Case("no call, truncate", "hi", [], [], "The episode ended: no tool was called.", 0.0,
         truncated=True, info={"truncation_reason": "no_tool_call"},
         options={"no_tool_call": "truncate"}),
    Case("more calls than allowed: the first ones run, and a note says so",
         calls("add", "look", "add"), [ok("1"), ok("2"), ok("3")], ["add", "look"],
         "only the first 2 of 3 tool calls ran", 0.0, options={"max_calls_per_step": 2}),
    Case("a bad call in text: a parse note and the error reward, nothing run",
         '<tool_call>{"name": "add", "arguments": nope}</tool_call>', [], [],
         "could not parse tool call", -1.0, info={"error_reason": "parse_error"},
         options={"error_reward": -1.0}),
    Case("the step limit truncates the last step", calls("add"), [ok("3")], ["add"], "3", 0.0,
         truncated=True, info={"truncation_reason": "max_steps"}, options={"max_steps": 4},
         steps=4),
    Case("the step limit does not override termination", calls("add"),
         [ok("won", 1.0, finished=True)], ["add"], "won", 1.0, terminated=True,
         options={"max_steps": 4}, steps=4),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_turn(case: Case) -> None:
    turn = Turn(parse_action(case.action), settings(**case.options), case.tools,
                steps=case.steps, env_name="bench")
    asked = drive(turn, case.results)
    assert asked == case.asked
    assert turn.next_call() is None  # complete: nothing more to run
    obs, reward, terminated, truncated, info = turn.finish()
    assert case.text in obs["text"]
    assert obs["images"] == ()
    assert reward == pytest.approx(case.reward)
    assert (terminated, truncated) == (case.terminated, case.truncated)
    for key, value in case.info.items():
        assert info[key] == value
    assert [c["name"] for c in info["calls"]] == case.asked[: len(info["calls"])]
    assert info["blocks"] == turn.blocks


def test_record_returns_the_call_record_with_its_own_blocks() -> None:
    turn = Turn(parse_action(calls("add")), settings(), TOOLS, steps=1)
    call = turn.next_call()
    assert call == ToolCall("add", {"n": 0})
    record = turn.record(call, ok("3", 0.5), 0.125)
    assert record == {
        "id": "call_1_0", "name": "add", "input": {"n": 0}, "ok": True, "reward": 0.5,
        "finished": False, "metadata": None, "error": None, "error_reason": None,
        "seconds": Elapsed(0.125), "blocks": [TextBlock(text="3")],
    }
    assert float(record["seconds"]) == 0.125 and isinstance(record["seconds"], Elapsed)


def test_a_models_own_call_id_is_kept_and_a_routed_message_answers_no_call() -> None:
    own = parse_action([{"id": "toolu_7", "name": "add", "arguments": {"n": 1}},
                        {"name": "add", "arguments": {"n": 2}}])
    turn = Turn(own, settings(), TOOLS, steps=3)
    ids = []
    while (call := turn.next_call()) is not None:
        ids.append(turn.record(call, ok("1"), 0.0)["id"])
    assert ids == ["toolu_7", "call_3_1"]
    numbered = own.numbered(3)
    assert [c.id for c in numbered.tool_calls] == ids
    assert numbered.numbered(9) is numbered  # every call has an id: the same turn
    routed = Turn(parse_action("my answer is 4"), settings(), WITH_ANSWER, steps=1)
    call = routed.next_call()
    assert call is not None and call.name == "answer"
    assert routed.record(call, ok("yes"), 0.0)["id"] is None


def test_a_refused_call_keeps_the_servers_message_and_tells_the_agent_what_to_do() -> None:
    turn = Turn(parse_action(calls("nosuch")), settings(), TOOLS, steps=1)
    call = turn.next_call()
    assert call is not None
    record = turn.record(call, refused("Unknown tool 'nosuch'", "not_found"), 0.0)
    assert record["error"] == "Unknown tool 'nosuch'"
    told = record["blocks"][0].text
    assert told == "Error: 'nosuch' is not a valid tool. Tools: add, look."  # what it may call


@pytest.mark.parametrize(("error", "reason", "lost"), [
    (OrsConnectionError("x", server="s"), "session_lost", True),
    (OrsSessionExpired("x", server="s"), "session_lost", True),
    (OrsTimeoutError("x", server="s"), "timeout", False),
    (OrsServerError("x", server="s"), "server_error", False),
])
def test_fail_says_whether_the_session_is_lost(error: OrsError, reason: str, lost: bool) -> None:
    turn = Turn(parse_action(calls("add", "look")), settings(), TOOLS, steps=1)
    assert turn.fail(error) is lost
    assert truncation_reason(error) == reason
    assert turn.failure is error
    assert turn.next_call() is None
    assert turn.finish()[4]["truncation_reason"] == reason


def test_no_tool_call_with_policy_error_raises_at_construction() -> None:
    with pytest.raises(OrsActionError, match="no_tool_call='nudge'"):
        Turn(parse_action("hi"), settings(no_tool_call="error"), TOOLS, steps=1)


def test_planned_counts_the_calls_the_step_may_run() -> None:
    assert Turn(parse_action(calls("add", "look")), settings(), TOOLS, steps=1).planned == 2
    assert Turn(parse_action("4"), settings(), WITH_ANSWER, steps=1).planned == 1


def test_elapsed_values_compare_equal_so_identical_steps_have_equal_infos() -> None:
    assert Elapsed(0.1) == Elapsed(3.0) and not Elapsed(0.1) != Elapsed(2.0)
    assert len({Elapsed(0.1), Elapsed(0.2)}) == 1
    assert Elapsed(0.1) != 0.1
