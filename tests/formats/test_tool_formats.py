"""tools_as, model outputs -> actions, step exchanges and message formats, on the bundled envs."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import numpy as np
import pytest
from pydantic import BaseModel

from ors_gym.actions import parse_action
from ors_gym.env import OrsEnv
from ors_gym.errors import OrsActionError
from ors_gym.formats import (
    NOT_RUN_ENDED,
    NOT_RUN_LIMIT,
    TOOL_FORMATS,
    as_action,
    assistant_turn,
    exchange_messages,
    render_messages,
    step_exchange,
    to_ors_messages,
    tools_as,
)
from ors_gym.protocol import (
    ImageBlock,
    ListToolsOutput,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
)
from ors_gym.schema import sample_from_schema
from ors_gym.scripted import FORMATS, ScriptedLLM
from ors_gym.wrappers.conversation import Conversation

EMPTY = {"type": "object", "properties": {}}


def _definition(tool: dict[str, Any], fmt: str) -> tuple[str, str, dict[str, Any]]:
    """(name, description, schema) of one tools_as entry, checking the format's shape."""
    if fmt == "openai":
        assert set(tool) == {"type", "function"} and tool["type"] == "function"
        fn = tool["function"]
        assert set(fn) == {"name", "description", "parameters"}
        return fn["name"], fn["description"], fn["parameters"]
    if fmt == "openai_responses":
        assert set(tool) == {"type", "name", "description", "parameters"}
        assert tool["type"] == "function"
        return tool["name"], tool["description"], tool["parameters"]
    if fmt == "anthropic":
        assert set(tool) == {"name", "description", "input_schema"}
        return tool["name"], tool["description"], tool["input_schema"]
    assert set(tool) == {"name", "description", "schema"}
    return tool["name"], tool["description"], tool["schema"]


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
@pytest.mark.parametrize("name", ["GridWorld", "Math", "QA", "Counter", "Toolbox"])
def test_tools_as_lists_the_session_tools(make_env: Any, name: str, fmt: str) -> None:
    env: OrsEnv = make_env(name)
    env.reset(seed=2)
    listed = env.tools
    defs = tools_as(listed, fmt)
    assert len(defs) == len(listed.tools)
    rng = np.random.default_rng(0)
    for tool, spec in zip(defs, listed.tools, strict=True):
        tool_name, description, schema = _definition(tool, fmt)
        assert (tool_name, description) == (spec.name, spec.description)
        assert schema == (spec.input_schema if spec.input_schema is not None else EMPTY)
        jsonschema.Draft202012Validator.check_schema(schema)
        for _ in range(5):  # what a model fills in from the schema, the env accepts
            jsonschema.validate(sample_from_schema(schema, rng), schema)
    if listed.terminal_tool is not None:  # hidden: a plain message reaches it
        assert listed.terminal_tool.name not in {_definition(t, fmt)[0] for t in defs}


def test_task_tools_and_missing_schemas(make_env: Any) -> None:
    toolbox: OrsEnv = make_env("Toolbox")
    _, info = toolbox.reset(options={"index": 2})  # Compute -(a + b): add and negate
    names = [t["function"]["name"] for t in tools_as(toolbox.tools, "openai")]
    assert {"add", "negate", "submit", "configure"} <= set(names) and "multiply" not in names
    assert tools_as(info["tools"], "anthropic") == tools_as(toolbox.tools, "anthropic")

    counter: OrsEnv = make_env("Counter")
    counter.reset(seed=0)
    by_name = {t["name"]: t for t in tools_as(counter.tools, "anthropic")}
    assert by_name["decrement"]["input_schema"] == EMPTY  # no input model
    assert "done" not in by_name  # the no-argument terminal tool stays hidden


def test_tools_as_copies_and_rejects_unknown_formats() -> None:
    listed = ListToolsOutput(
        tools=[ToolSpec(name="t", description="d", input_schema={"type": "object"})]
    )
    defs = tools_as(listed, "json_schema")
    defs[0]["schema"]["type"] = "changed"
    assert listed.tools[0].input_schema == {"type": "object"}
    with pytest.raises(ValueError, match=r"unknown tool format 'gemini'.*openai"):
        tools_as(listed, "gemini")
    with pytest.raises(TypeError, match="ToolSpec"):
        tools_as([42], "openai")  # type: ignore[list-item]


# ------------------------------------------------------------ model outputs


#: An OpenAI Responses output: a message and two function calls (shared by two shapes below).
_RESPONSES_OUTPUT = [
    {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "Moving.", "annotations": []}]},
    {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "move",
     "arguments": '{"direction": "up"}', "status": "completed"},
    {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "move",
     "arguments": '{"direction": "left"}', "status": "completed"},
]

CLIENT_OUTPUTS: dict[str, Any] = {
    "openai_message": {
        "role": "assistant",
        "content": "Moving.",
        "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "move", "arguments": '{"direction": "up"}'}},
            {"id": "call_b", "type": "function",
             "function": {"name": "move", "arguments": '{"direction": "left"}'}},
        ],
        "refusal": None,
        "reasoning_content": "Up first.",
    },
    "openai_completion": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Moving.",
            "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "move", "arguments": '{"direction": "up"}'}},
                {"id": "call_b", "type": "function",
                 "function": {"name": "move", "arguments": '{"direction": "left"}'}},
            ]}}],
    },
    "anthropic_blocks": [
        {"type": "thinking", "thinking": "Up first.", "signature": "sig"},
        {"type": "text", "text": "Moving."},
        {"type": "tool_use", "id": "call_a", "name": "move", "input": {"direction": "up"}},
        {"type": "tool_use", "id": "call_b", "name": "move", "input": {"direction": "left"}},
    ],
    "anthropic_message": {
        "id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use",
        "content": [
            {"type": "text", "text": "Moving."},
            {"type": "tool_use", "id": "call_a", "name": "move", "input": {"direction": "up"}},
            {"type": "tool_use", "id": "call_b", "name": "move", "input": {"direction": "left"}},
        ],
    },
    "responses_items": [
        {"type": "reasoning", "id": "rs_1", "summary": [
            {"type": "summary_text", "text": "Up first."}]},
        *_RESPONSES_OUTPUT,
    ],
    "responses_response": {
        "id": "resp_1", "object": "response", "status": "completed",
        "output": _RESPONSES_OUTPUT,
    },
    "ors_message": {"role": "assistant", "blocks": [
        {"type": "text", "text": "Moving."},
        {"type": "tool_call", "id": "call_a", "name": "move", "input": {"direction": "up"}},
        {"type": "tool_call", "id": "call_b", "name": "move", "input": {"direction": "left"}},
    ]},
}


@pytest.mark.parametrize("kind", sorted(CLIENT_OUTPUTS))
def test_client_outputs_become_actions_the_env_runs(make_env: Any, kind: str) -> None:
    output = CLIENT_OUTPUTS[kind]
    turn = assistant_turn(output, step=1)
    assert turn.text == "Moving."
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_a", "move", {"direction": "up"}), ("call_b", "move", {"direction": "left"}),
    ]
    if kind in ("openai_message", "anthropic_blocks", "responses_items"):
        assert [r.text for r in turn.reasoning] == ["Up first."]

    env: OrsEnv = make_env("GridWorld")
    env.reset(options={"task_spec": {"size": 5, "start": [2, 2], "goal": [4, 4]}})
    _, _, _, _, info = env.step(as_action(output))
    assert [(c["name"], c["input"]) for c in info["calls"]] == [
        ("move", {"direction": "up"}), ("move", {"direction": "left"}),
    ]
    assert info["calls"][1]["metadata"]["agent"] == [1, 1]


class _SdkMessage(BaseModel):
    """Stands in for a client library's pydantic response object (model_dump)."""

    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None


def test_sdk_objects_text_calls_and_bad_arguments() -> None:
    sdk = _SdkMessage(role="assistant", content=None, tool_calls=[
        {"id": "x", "type": "function",
         "function": {"name": "submit", "arguments": '{"answer": 4}'}}
    ])
    assert assistant_turn(sdk, step=3).tool_calls[0].arguments == {"answer": 4}

    # Without native calls the content is parsed as text: calls written in tags still count.
    call = '<tool_call>{"name": "submit", "arguments": {"answer": 4}}</tool_call>'
    tagged = {"role": "assistant", "content": "Sure.\n" + call}
    turn = assistant_turn(tagged, step=3)
    assert [(c.id, c.name) for c in turn.tool_calls] == [("call_3_0", "submit")]
    assert turn.text == "Sure."

    broken = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "submit", "arguments": "{oops"}}]}
    turn = assistant_turn(broken, step=1)
    assert turn.tool_calls == () and "not valid JSON" in turn.errors[0]

    assert as_action("plain text") == "plain text"
    generic = {"tool_calls": [{"name": "a", "arguments": {}}]}
    assert as_action(generic) is generic
    with pytest.raises(OrsActionError):
        assistant_turn({"role": "assistant", "content": 5}, step=1)
    with pytest.raises(OrsActionError):
        assistant_turn({"role": "assistant", "content": "", "tool_calls": "nope"}, step=1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_scripted_outputs_round_trip_through_orsenv(make_env: Any, fmt: str) -> None:
    env: OrsEnv = make_env("Math")
    obs, _ = env.reset(seed=4)
    llm = ScriptedLLM(fmt, seed=0)
    output = llm.act(obs, env.tools)
    turn = assistant_turn(output, step=1)
    assert [c.name for c in turn.tool_calls] == ["submit"]
    _, reward, terminated, _, info = env.step(as_action(output))
    assert terminated and reward == 1.0
    assert info["calls"][0]["input"] == turn.tool_calls[0].arguments


@pytest.mark.parametrize("fmt", ["hermes", "json_fence", "responses"])
def test_text_and_responses_outputs_step_orsenv_as_they_are(make_env: Any, fmt: str) -> None:
    env: OrsEnv = make_env("Math")
    obs, _ = env.reset(seed=4)
    _, reward, terminated, _, _ = env.step(ScriptedLLM(fmt, seed=0).act(obs, env.tools))
    assert terminated and reward == 1.0


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_client_messages_step_orsenv_as_they_are(fmt: str) -> None:
    env = OrsEnv(env_class="ors_gym.envs.math:Math")
    try:
        obs, _ = env.reset(seed=4)
        _, reward, terminated, _, _ = env.step(ScriptedLLM(fmt, seed=0).act(obs, env.tools))
        assert terminated and reward == 1.0
    finally:
        env.close()


# ---------------------------------------------------------------- step exchanges


def test_exchange_of_several_calls_cuts_blocks_per_call(make_env: Any) -> None:
    env: OrsEnv = make_env("GridWorld")
    env.reset(options={"task_spec": {"size": 5, "start": [2, 2], "goal": [4, 4]}})
    action = {"tool_calls": [
        {"name": "move", "arguments": {"direction": "up"}},
        {"name": "move", "arguments": {"direction": "right"}},
        {"name": "move", "arguments": "{broken"},
    ]}
    turn = assistant_turn(action, step=2)
    _, _, _, _, info = env.step(turn)
    exchange = step_exchange(turn, info)
    assert [r.tool_call_id for r in exchange.results] == ["call_2_0", "call_2_1"]
    for result, (direction, cell) in zip(exchange.results, [("up", "[1, 2]"), ("right", "[1, 3]")],
                                         strict=True):
        text, image = result.blocks
        assert isinstance(text, TextBlock) and text.text.startswith(f"Moved {direction} to {cell}")
        assert isinstance(image, ImageBlock)
    assert len(exchange.feedback) == 1 and "could not parse" in exchange.feedback[0].text  # type: ignore[union-attr]


def test_call_ids_go_through_the_env_and_tie_results_to_calls(make_env: Any) -> None:
    """A model's own ids and the ids given at parse time reach the env's records, and
    the exchange ties results by them, not by position."""
    env: OrsEnv = make_env("GridWorld")
    env.reset(options={"task_spec": {"size": 5, "start": [2, 2], "goal": [4, 4]}})
    output = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "toolu_up", "type": "function",
         "function": {"name": "move", "arguments": '{"direction": "up"}'}},
        {"type": "function", "function": {"name": "move", "arguments": '{"direction": "left"}'}},
    ]}
    turn = assistant_turn(output, step=4)
    assert [c.id for c in turn.tool_calls] == ["toolu_up", "call_4_1"]
    _, _, _, _, info = env.step(turn)
    assert [c["id"] for c in info["calls"]] == ["toolu_up", "call_4_1"]
    # The records answer by id: listed in another order, each result keeps its call.
    swapped = {**info, "calls": list(reversed(info["calls"])), "blocks": []}
    exchange = step_exchange(turn, swapped)
    assert [(r.tool_call_id, r.input["direction"]) for r in exchange.results] == [
        ("call_4_1", "left"), ("toolu_up", "up")]
    assert exchange.not_run == ()
    # An action with no ids gets them from the env's step number.
    up = {"name": "move", "arguments": {"direction": "up"}}
    _, _, _, _, info = env.step({"tool_calls": [up]})
    assert [c["id"] for c in info["calls"]] == ["call_2_0"]


def test_calls_that_did_not_run_get_results(make_env: Any) -> None:
    env: OrsEnv = make_env("Math", max_calls_per_step=2)
    env.reset(seed=0)
    # submit ends the episode: the call after it never runs.
    turn = assistant_turn([{"name": "submit", "arguments": {"answer": 1}},
                           {"name": "submit", "arguments": {"answer": 2}}], step=1)
    exchange = step_exchange(turn, env.step(turn)[4])
    assert exchange.not_run == (("call_1_1", NOT_RUN_ENDED),)
    reply = exchange_messages(exchange)[1]
    assert [b.tool_call_id for b in reply.blocks] == ["call_1_0", "call_1_1"]  # type: ignore[union-attr]
    assert [b.is_error for b in reply.blocks] == [False, True]  # type: ignore[union-attr]

    grid: OrsEnv = make_env("GridWorld", max_calls_per_step=2)
    grid.reset(options={"task_spec": {"size": 5, "start": [2, 2], "goal": [4, 4]}})
    calls = [{"name": "move", "arguments": {"direction": d}} for d in ("up", "left", "up")]
    turn = assistant_turn(calls, step=1)
    exchange = step_exchange(turn, grid.step(turn)[4])
    assert len(exchange.results) == 2 and exchange.not_run == (("call_1_2", NOT_RUN_LIMIT),)
    assert "only the first 2 of 3" in exchange.feedback[0].text  # type: ignore[union-attr]


def test_plain_message_to_the_terminal_tool_answers_no_call(make_env: Any) -> None:
    env: OrsEnv = make_env("QA")
    _, info = env.reset(options={"index": 0})
    turn = assistant_turn("Paris", step=1)
    _, reward, terminated, _, info = env.step(turn)
    exchange = step_exchange(turn, info)
    assert exchange.routed and reward == 1.0 and terminated
    assistant, reply = exchange_messages(exchange)
    assert [b.type for b in assistant.blocks] == ["text"]
    assert [b.type for b in reply.blocks] == ["text"] and reply.blocks[0].text == "Correct!"  # type: ignore[union-attr]


# ------------------------------------------------------------------ message formats


def _gridworld_conversation(fmt: str) -> Conversation:
    env = Conversation(OrsEnv(env_class="ors_gym.envs.gridworld:GridWorld"), fmt)
    env.reset(options={"task_spec": {"size": 5, "start": [2, 2], "goal": [4, 4]}})
    env.step(CLIENT_OUTPUTS["anthropic_blocks"])  # two calls, each with text + image
    env.step("no tool call here")  # a nudge
    return env


def _strip(messages: list[Message]) -> list[dict[str, Any]]:
    """Messages as dicts without ``detail`` fields and unsigned reasoning (not rendered)."""
    out = []
    for m in messages:
        dumped = m.model_dump(mode="json", exclude={"detail"})
        blocks = []
        for b in dumped["blocks"]:
            if b["type"] == "reasoning" and not b.get("signature"):
                continue
            b.pop("detail", None)
            for inner in b.get("blocks", []):
                inner.pop("detail", None)
            blocks.append(b)
        dumped["blocks"] = blocks
        out.append(dumped)
    return out


def test_anthropic_messages_convert_back_to_the_same_ors_messages() -> None:
    env = _gridworld_conversation("anthropic")
    try:
        back = to_ors_messages(env.messages)
        assert _strip(back) == _strip(env.ors_messages)
        assert render_messages(back, "anthropic") == env.messages
    finally:
        env.close()


def test_openai_messages_keep_calls_results_and_images() -> None:
    env = _gridworld_conversation("openai")
    try:
        msgs = env.messages
        assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "user",
                                            "assistant", "user"]
        call_ids = [c["id"] for c in msgs[1]["tool_calls"]]
        assert call_ids == ["call_a", "call_b"]
        assert [msgs[2]["tool_call_id"], msgs[3]["tool_call_id"]] == call_ids
        assert json.loads(msgs[1]["tool_calls"][0]["function"]["arguments"]) == {"direction": "up"}
        images = [p for p in msgs[4]["content"] if p["type"] == "image_url"]
        assert len(images) == 2
        assert images[0]["image_url"]["url"].startswith("data:image/png;base64,")
        back = to_ors_messages(msgs)
        # The tool results and the user message with their images merge into one user turn.
        assert [m.role for m in back] == ["user", "assistant", "user", "assistant", "user"]
        results = [b for b in back[2].blocks if isinstance(b, ToolResultBlock)]
        assert [r.tool_call_id for r in results] == call_ids
        assert sum(isinstance(b, ImageBlock) for b in back[2].blocks) == 2
        calls = [b for b in back[1].blocks if isinstance(b, ToolCallBlock)]
        assert [c.input for c in calls] == [{"direction": "up"}, {"direction": "left"}]
    finally:
        env.close()


def test_to_ors_messages_errors_and_url_images() -> None:
    msgs = to_ors_messages([
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "image_url",
                                      "image_url": {"url": "https://example.org/cat.png"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{bad"}}]},
    ])
    assert msgs[0].role == "system"
    assert msgs[1].blocks[0] == TextBlock(text="[image at https://example.org/cat.png]")
    call = msgs[2].blocks[0]
    assert isinstance(call, ToolCallBlock) and call.input == {}
    assert call.detail == {"raw_arguments": "{bad"}
    with pytest.raises(ValueError, match=r"message 0 .*unknown role 'robot'"):
        to_ors_messages([{"role": "robot", "content": "hi"}])
    with pytest.raises(ValueError, match="message 1 "):
        to_ors_messages([{"role": "user", "content": "hi"}, 7])
    with pytest.raises(ValueError, match="unknown message format"):
        render_messages([], "gemini")


def test_parse_action_still_sees_what_as_action_returns() -> None:
    # as_action only reshapes: the calls parse_action finds are the same.
    for output in CLIENT_OUTPUTS.values():
        parsed = parse_action(as_action(output))
        assert [c.name for c in parsed.tool_calls] == ["move", "move"]
