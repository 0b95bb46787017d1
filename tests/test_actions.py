"""parse_action: text/dict -> tool calls; agent mistakes -> errors; bad structure -> raise."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ors_gym.actions import AssistantTurn, ToolCall, parse_action
from ors_gym.errors import OrsActionError

HOW_TO = 'Write tool calls as {"name": ..., "arguments": {...}}'


def calls(parsed: AssistantTurn) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in parsed.tool_calls]


# ------------------------------------------------------------------ plain text


@pytest.mark.parametrize(
    "text",
    ["The answer is 42.", "", "  padded  ", "Ünïcödé ✓ 中文 😀", "braces { } and [ ] only"],
)
def test_plain_text_is_a_message(text: str) -> None:
    parsed = parse_action(text)
    assert parsed == AssistantTurn((), text.strip(), ())


def test_json_that_is_not_a_tool_call_stays_in_the_message() -> None:
    for text in (
        'The config is {"name": "Bob", "age": 3}.',
        '{"name": "Bob"}',
        '{"name": "x", "arguments": 3}',
        '{"name": 7, "arguments": {}}',
        '[{"name": "Bob"}, 1]',
        '{"result": {"name": "x", "arguments": {}}}',  # a call nested in other JSON
        '{"name": "x", "input": "not json"}',
    ):
        parsed = parse_action(text)
        assert parsed.tool_calls == () and parsed.errors == (), text
        assert parsed.text == text


# ------------------------------------------------------------- JSON in text


def test_whole_text_json_call() -> None:
    parsed = parse_action('{"name": "search", "arguments": {"query": "cats", "k": 3}}')
    assert calls(parsed) == [("search", {"query": "cats", "k": 3})]
    assert parsed.text == "" and parsed.errors == ()


@pytest.mark.parametrize("key", ["arguments", "input", "parameters"])
def test_argument_key_aliases(key: str) -> None:
    parsed = parse_action(json.dumps({"name": "f", key: {"a": 1}}))
    assert calls(parsed) == [("f", {"a": 1})]


def test_arguments_as_json_string() -> None:
    text = json.dumps({"name": "f", "arguments": json.dumps({"a": [1, 2], "b": None})})
    assert calls(parse_action(text)) == [("f", {"a": [1, 2], "b": None})]


def test_json_list_of_calls() -> None:
    text = json.dumps([{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}])
    assert calls(parse_action(text)) == [("a", {}), ("b", {"x": 1})]


def test_fenced_block_is_removed_from_the_message() -> None:
    text = (
        "Let me look that up.\n\n```json\n"
        '{"name": "search", "arguments": {"query": "weather"}}\n'
        "```\n\nI will report back."
    )
    parsed = parse_action(text)
    assert calls(parsed) == [("search", {"query": "weather"})]
    assert parsed.text == "Let me look that up.\n\nI will report back."


def test_calls_embedded_in_prose() -> None:
    text = (
        'First {"name": "a", "input": {"x": 1}} then '
        '[{"name": "b", "parameters": {}}, {"name": "c", "arguments": "{}"}] done.'
    )
    parsed = parse_action(text)
    assert calls(parsed) == [("a", {"x": 1}), ("b", {}), ("c", {})]
    assert parsed.text == "First then done."


def test_seams_are_tidied() -> None:
    call = '{"name": "f", "arguments": {}}'
    assert parse_action(f"a{call}b").text == "ab"
    assert parse_action(f"a  {call}   b").text == "a b"
    assert parse_action(f"a\n\n\n{call}\n\n\nb").text == "a\n\nb"
    assert parse_action(f"a\n{call} b").text == "a\nb"


def test_non_ascii_arguments_survive() -> None:
    parsed = parse_action('Voilà: {"name": "say", "arguments": {"text": "héllo 中文 😀"}}')
    assert calls(parsed) == [("say", {"text": "héllo 中文 😀"})]
    assert parsed.text == "Voilà:"


def test_many_concatenated_calls() -> None:
    text = " ".join(json.dumps({"name": f"t{i}", "arguments": {"i": i}}) for i in range(50))
    parsed = parse_action(text)
    assert calls(parsed) == [(f"t{i}", {"i": i}) for i in range(50)]
    assert parsed.text == ""


# ----------------------------------------------------------- <tool_call> tags


def test_hermes_tags_several() -> None:
    text = (
        "I'll check both.\n"
        '<tool_call>\n{"name": "get", "arguments": {"id": 1}}\n</tool_call>\n'
        '<tool_call>{"name": "get", "arguments": {"id": 2}}</tool_call>'
    )
    parsed = parse_action(text)
    assert calls(parsed) == [("get", {"id": 1}), ("get", {"id": 2})]
    assert parsed.text == "I'll check both."
    assert parsed.errors == ()


def test_unclosed_tag_at_end_still_parses() -> None:
    parsed = parse_action('<tool_call>{"name": "f", "arguments": {"a": 1}}')
    assert calls(parsed) == [("f", {"a": 1})]


def test_tag_without_arguments_is_a_call_with_none() -> None:
    assert calls(parse_action('<tool_call>{"name": "look"}</tool_call>')) == [("look", {})]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"name": "f", "arguments": {"a": 1}', "not valid JSON"),
        ("", "empty"),
        ('{"arguments": {}}', 'no "name"'),
        ('"just a string"', "expected a JSON object"),
        ('{"name": "f", "arguments": "{oops"}', "arguments of 'f' are not valid JSON"),
        ('{"name": "f", "arguments": 5}', "must be a JSON object, got a number"),
    ],
)
def test_bad_tag_body_is_an_agent_error(body: str, reason: str) -> None:
    parsed = parse_action(f"Thinking.<tool_call>{body}</tool_call>")
    assert parsed.tool_calls == ()
    assert parsed.text == "Thinking."
    assert len(parsed.errors) == 1
    assert parsed.errors[0].startswith("could not parse tool call: ")
    assert reason in parsed.errors[0] and HOW_TO in parsed.errors[0]


def test_one_bad_tag_does_not_hide_a_good_one() -> None:
    text = '<tool_call>{bad}</tool_call><tool_call>{"name": "ok", "arguments": {}}</tool_call>'
    parsed = parse_action(text)
    assert calls(parsed) == [("ok", {})]
    assert len(parsed.errors) == 1


# ------------------------------------------------------ agent mistakes in text


def test_unparseable_arguments_string_is_an_agent_error() -> None:
    parsed = parse_action('{"name": "f", "arguments": "{not json"}')
    assert parsed.tool_calls == () and parsed.text == ""
    assert len(parsed.errors) == 1 and "arguments of 'f' are not valid JSON" in parsed.errors[0]


def test_arguments_string_of_a_non_object_is_an_agent_error() -> None:
    parsed = parse_action('{"name": "f", "arguments": "[1, 2]"}')
    assert parsed.tool_calls == ()
    assert "must be a JSON object, got an array" in parsed.errors[0]


def test_broken_whole_text_call_is_an_agent_error() -> None:
    parsed = parse_action('{"name": "f", "arguments": {"a": 1}')
    assert parsed.tool_calls == () and parsed.text == ""
    assert "not valid JSON" in parsed.errors[0] and HOW_TO in parsed.errors[0]


def test_broken_fenced_call_is_an_agent_error() -> None:
    parsed = parse_action('Here:\n```json\n{"name": "f", "arguments": {"a": }\n```')
    assert parsed.tool_calls == () and parsed.text == "Here:"
    assert len(parsed.errors) == 1


# ------------------------------------------------------------ structured input


def test_dict_generic_shape() -> None:
    parsed = parse_action(
        {"tool_calls": [{"name": "f", "arguments": {"a": 1}}, {"name": "g"}], "message": "hi"}
    )
    assert calls(parsed) == [("f", {"a": 1}), ("g", {})]
    assert parsed.text == "hi" and parsed.errors == ()


def test_dict_with_only_a_message_and_empty_dict() -> None:
    assert parse_action({"message": "done"}) == AssistantTurn((), "done", ())
    assert parse_action({}) == AssistantTurn((), "", ())
    assert parse_action({"tool_calls": [], "message": None}) == AssistantTurn((), "", ())


def test_openai_chat_completions_shape() -> None:
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"city": "Paris"}'},
    }
    parsed = parse_action({"tool_calls": [call]})
    assert parsed.tool_calls == (ToolCall("lookup", {"city": "Paris"}, "call_abc"),)


def test_anthropic_tool_use_shape() -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Oslo"}}
    parsed = parse_action({"tool_calls": [call], "message": "Checking."})
    assert parsed.tool_calls == (ToolCall("lookup", {"city": "Oslo"}, "toolu_1"),)
    assert parsed.text == "Checking."


def test_openai_responses_shape_uses_call_id() -> None:
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_9",
        "name": "lookup",
        "arguments": '{"city": "Rome"}',
        "status": "completed",
    }
    parsed = parse_action({"tool_calls": [call]})
    assert parsed.tool_calls == (ToolCall("lookup", {"city": "Rome"}, "call_9"),)


def test_bare_call_dict_and_list_of_calls() -> None:
    assert calls(parse_action({"name": "f", "arguments": {"a": 1}})) == [("f", {"a": 1})]
    assert calls(parse_action({"name": "f", "input": {"a": 1}})) == [("f", {"a": 1})]
    seq = [{"name": "f", "arguments": {}}, {"name": "g", "arguments": "{}"}]
    assert calls(parse_action(seq)) == [("f", {}), ("g", {})]
    assert calls(parse_action(tuple(seq))) == [("f", {}), ("g", {})]


def test_tool_call_objects_are_accepted() -> None:
    call = ToolCall("f", {"a": np.int64(1)}, "id-1")
    assert parse_action(call).tool_calls == (ToolCall("f", {"a": 1}, "id-1"),)
    assert parse_action({"tool_calls": [call]}).tool_calls == (ToolCall("f", {"a": 1}, "id-1"),)
    with pytest.raises(OrsActionError, match="non-str key"):
        parse_action([ToolCall("f", {2: "x"})])


def test_empty_arguments_string_means_no_arguments() -> None:
    assert calls(parse_action({"name": "f", "arguments": ""})) == [("f", {})]
    assert calls(parse_action({"name": "f", "arguments": None})) == [("f", {})]


def test_dict_arguments_string_mistakes_are_agent_errors() -> None:
    parsed = parse_action(
        {"tool_calls": [{"name": "f", "arguments": "{bad"}, {"name": "g", "arguments": "7"}]}
    )
    assert parsed.tool_calls == ()
    assert len(parsed.errors) == 2
    assert "arguments of 'f' are not valid JSON" in parsed.errors[0]
    assert "arguments of 'g' must be a JSON object, got a number" in parsed.errors[1]


def test_numpy_values_become_python_values() -> None:
    args = {"i": np.int64(3), "x": np.float32(0.5), "b": np.bool_(True), "v": np.arange(3)}
    parsed = parse_action({"name": "f", "arguments": args})
    out = parsed.tool_calls[0].arguments
    assert out == {"i": 3, "x": 0.5, "b": True, "v": [0, 1, 2]}
    assert [type(out[k]) for k in ("i", "x", "b")] == [int, float, bool]
    json.dumps(out)  # plain JSON now


def test_arguments_are_copied() -> None:
    args: dict[str, Any] = {"a": [1]}
    parsed = parse_action({"name": "f", "arguments": args})
    args["a"].append(2)
    args["b"] = 1
    assert parsed.tool_calls[0].arguments == {"a": [1]}


# ---------------------------------------------------- structural errors raise


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        (7, "got int"),
        (None, "got NoneType"),
        (b"bytes", "got bytes"),
        (3.5, "got float"),
        ({"tool_calls": "f()"}, '"tool_calls" must be a list'),
        ({"tool_calls": {"name": "f"}}, '"tool_calls" must be a list'),
        ({"tool_calls": [{"arguments": {}}]}, "has no tool name"),
        ({"tool_calls": [{"name": "", "arguments": {}}]}, "has no tool name"),
        ({"tool_calls": [{"name": 3, "arguments": {}}]}, "has no tool name"),
        ({"tool_calls": ["f()"]}, "must be a tool-call dict, got str"),
        ({"tool_calls": [], "msg": "x"}, "unknown key(s) 'msg'"),
        ({"text": "hello"}, "unknown key(s) 'text'"),
        ({"message": 3}, '"message" must be a str'),
        ({"name": "f", "arguments": 3}, "must be a dict or a JSON-object string, got int"),
        ({"name": "f", "arguments": ["a"]}, "got list"),
        ({"name": "f", "arguments": {1: "a"}}, "non-str key 1"),
        ({"name": "f", "arguments": {"s": {1, 2}}}, "holds a set"),
        ({"name": "f", "id": 5, "arguments": {}}, "id must be a str"),
        ({"name": "f", "arguments": {"t": np.datetime64("2020-01-01")}}, "not JSON"),
    ],
)
def test_structural_errors_raise_with_the_valid_shape(action: Any, fragment: str) -> None:
    with pytest.raises(OrsActionError) as info:
        parse_action(action)
    message = str(info.value)
    assert fragment in message
    assert isinstance(info.value, ValueError)


def test_error_message_shows_the_valid_shape() -> None:
    with pytest.raises(OrsActionError, match=r'\{"tool_calls": \[\{"name": "tool"'):
        parse_action(42)


def test_deep_python_nesting_raises_action_error() -> None:
    deep: Any = {}
    node = deep
    for _ in range(300):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(OrsActionError, match="nested more than"):
        parse_action({"name": "f", "arguments": deep})


# ------------------------------------------------------------ adversarial text


@pytest.mark.parametrize(
    "text",
    [
        '{"name": ' * 5000,
        "[" * 5000 + '"name"',
        "{" * 5000 + '"name"',
        '[{"name":1}' * 3000,
        '<tool_call>{"name": "f", "arguments": ' + "[" * 5000,
        '```json\n{"name": ' + "{" * 3000 + "\n```",
    ],
)
def test_pathological_text_is_handled(text: str) -> None:
    parsed = parse_action(text)
    assert isinstance(parsed, AssistantTurn)
    assert parsed.tool_calls == ()


def test_tool_call_after_lots_of_code_is_found() -> None:
    code = 'int main() { puts("name"); return 0; }\n' * 2000
    call = {"name": "write", "arguments": {"text": "x" * 50_000}}
    parsed = parse_action(code + json.dumps(call))
    assert calls(parsed) == [("write", call["arguments"])]
    assert parsed.text == code.strip()


# ---------------------------------------------------------------- properties

json_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
call_dicts = st.fixed_dictionaries(
    {
        "name": st.text(min_size=1, max_size=12),
        "arguments": st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    }
)
# Fragments that steer random text into the parser's branches.
fragments = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "```json\n",
        "```",
        '{"name": "f", "arguments": {"a": 1}}',
        '{"name": "f", "arguments": "{\\"a\\": 1}"}',
        '{"name": ',
        '"arguments": ',
        '"input"',
        "{",
        "}",
        "[",
        "]",
        '"',
        ",",
        ":",
        "\n",
        "null",
        "[{",
    ]
)
texts = st.one_of(
    st.text(),
    st.lists(st.one_of(fragments, st.text(max_size=5)), max_size=30).map("".join),
)
anything = st.one_of(
    texts,
    json_values,
    st.dictionaries(
        st.sampled_from(["tool_calls", "message", "name", "arguments", "input", "type", "x"]),
        st.one_of(json_values, st.lists(st.one_of(call_dicts, json_values), max_size=3)),
        max_size=3,
    ),
    st.lists(st.one_of(call_dicts, json_values), max_size=3),
    st.binary(max_size=5),
)


def _check_parsed(parsed: AssistantTurn) -> None:
    assert isinstance(parsed, AssistantTurn)
    assert isinstance(parsed.text, str)
    assert all(isinstance(e, str) and e for e in parsed.errors)
    for call in parsed.tool_calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
        assert call.id is None or isinstance(call.id, str)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(anything)
def test_fuzz_never_raises_anything_but_action_error(action: Any) -> None:
    try:
        parsed = parse_action(action)
    except OrsActionError as exc:
        assert str(exc)
        return
    _check_parsed(parsed)
    if isinstance(action, str):
        assert len(parsed.text) <= len(action)


@settings(max_examples=200, deadline=None)
@given(st.lists(call_dicts, max_size=4), st.text(max_size=20))
def test_structured_calls_round_trip(raw: list[dict[str, Any]], message: str) -> None:
    parsed = parse_action({"tool_calls": raw, "message": message})
    assert calls(parsed) == [(c["name"], c["arguments"]) for c in raw]
    assert parsed.text == message
    as_strings = [{"name": c["name"], "arguments": json.dumps(c["arguments"])} for c in raw]
    assert calls(parse_action(as_strings)) == calls(parsed)


prose = st.text(alphabet=st.characters(blacklist_characters="{}[]<`\"'\\"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(prose, call_dicts, prose)
def test_text_call_in_prose_round_trips(before: str, call: dict[str, Any], after: str) -> None:
    parsed = parse_action(f"{before} {json.dumps(call, ensure_ascii=False)} {after}")
    assert calls(parsed) == [(call["name"], call["arguments"])]
    assert parsed.errors == ()
    expected = " ".join(p for p in (before.strip(), after.strip()) if p)
    assert " ".join(parsed.text.split()) == " ".join(expected.split())


@settings(max_examples=100, deadline=None)
@given(prose, st.lists(call_dicts, min_size=1, max_size=3))
def test_tagged_calls_round_trip(before: str, raw: list[dict[str, Any]]) -> None:
    bodies = [json.dumps(c) for c in raw]
    # A call whose own JSON holds a tag is ambiguous in this format: no parser can round-trip it.
    assume(not any("<tool_call>" in b or "</tool_call>" in b for b in bodies))
    tags = "".join(f"<tool_call>{b}</tool_call>\n" for b in bodies)
    parsed = parse_action(before + "\n" + tags)
    assert calls(parsed) == [(c["name"], c["arguments"]) for c in raw]
    assert parsed.text == before.strip()


def test_agent_mistakes_are_sentences_naming_the_nearest_name() -> None:
    """A misspelt argument name reaches the agent named, beside the one the tool takes (the
    SDK's model ignores the unknown key and reports only the parameter as missing); an
    unknown tool is one sentence naming the tools."""
    import gymnasium as gym

    import ors_gym  # noqa: F401 - registers the ors/... ids

    env = gym.make("ors/GridWorld-v0")
    try:
        env.reset(seed=0)
        obs, _, _, _, info = env.step(
            {"tool_calls": [{"name": "move", "arguments": {"dirction": "down"}}]}
        )
        assert info["error_reason"] == "input_validation"
        assert obs["text"].splitlines() == [
            "Error: The arguments of 'move' are invalid:",
            "'dirction' is not an argument of 'move'; did you mean 'direction'?",
            "Its arguments: direction.",
            "direction: Field required.",
        ]
        obs, _, _, _, info = env.step({"tool_calls": [{"name": "nope", "arguments": {}}]})
        assert obs["text"] == "Error: 'nope' is not a valid tool. Tools: move."
        assert info["calls"][0]["error"] == "'nope' is not a valid tool"  # the server's words
        obs, _, _, _, _ = env.step(
            {"tool_calls": [{"name": "move", "arguments": {"direction": "down", "zz": 1}}]}
        )
        assert "'zz' is not an argument" not in obs["text"]  # a valid call ran: not an error
    finally:
        env.close()


def test_an_unknown_action_key_names_the_nearest_one() -> None:
    with pytest.raises(OrsActionError, match=r"'tool_call' \(did you mean 'tool_calls'\?\)"):
        parse_action({"tool_call": [{"name": "move", "arguments": {}}]})



def test_the_fast_builders_make_what_the_dataclasses_make() -> None:
    # _parse_calls fills ToolCall and AssistantTurn in place; they must stay equal to
    # what their constructors make, field for field (a new field must be added there).
    from dataclasses import FrozenInstanceError, fields

    from ors_gym.actions import _tool_call

    assert [f.name for f in fields(ToolCall)] == ["name", "arguments", "id"]
    assert [f.name for f in fields(AssistantTurn)] == ["tool_calls", "text", "errors", "reasoning"]
    call = _tool_call("add", {"a": 1})
    assert call == ToolCall("add", {"a": 1}) and repr(call) == repr(ToolCall("add", {"a": 1}))
    with pytest.raises(FrozenInstanceError):
        call.name = "other"  # type: ignore[misc]
    parsed = parse_action({"tool_calls": [{"name": "add", "arguments": {"a": 1}},
                                          {"name": "x", "arguments": "{bad"}]})
    assert type(parsed) is AssistantTurn
    assert parsed == AssistantTurn((ToolCall("add", {"a": 1}),), "", parsed.errors)
    assert len(parsed.errors) == 1 and "not valid JSON" in parsed.errors[0]
