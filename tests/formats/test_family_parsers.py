"""Each model family's raw completion text -> message, reasoning and tool calls."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ors_gym.actions import AssistantTurn, ToolCall
from ors_gym.families._examples import example_call
from ors_gym.families._formats import FORMATS
from ors_gym.families._markers import renderer_for
from ors_gym.families._parse import (
    call_example,
    from_parsed_response,
    parse_text,
)
from ors_gym.protocol import ReasoningBlock

TEXT_FAMILIES = tuple(FORMATS)
_XML = ("qwen3.5", "glm-4.5", "glm-5", "minimax-m2")
_THINK = ("hermes", "qwen3.5", "glm-4.5", "glm-5", "kimi-k2", "minimax-m2", "deepseek-v3")
_THINK += ("deepseek-v3.1",)
_DS_CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
_DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"

MOVE = {
    "type": "function",
    "function": {
        "name": "move",
        "description": "Move one step.",
        "parameters": {
            "type": "object",
            "properties": {
                "direction": {"type": "string", "enum": ["up", "down"]},
                "amount": {"type": "integer"},
                "label": {"type": "string"},
            },
        },
    },
}
LOOK = {"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}
TOOLS = [MOVE, LOOK]


def test_harmony_turns_end_where_sampling_stops() -> None:
    """gpt-oss's text reader and its bridge end a turn on the same tokens, harmony's stop
    tokens (<|return|> and <|call|>): what a server failed to stop before is not read."""
    fmt = FORMATS["gpt-oss"]
    assert set(fmt.stops) == {"<|return|>", "<|call|>"}
    call = call_example("gpt-oss", "move", {"direction": "up"})
    stray = "<|start|>assistant<|channel|>final<|message|>Moved.<|return|>"
    parsed = parse_text("gpt-oss", call + stray, TOOLS)
    assert _plain(parsed.tool_calls) == [("move", {"direction": "up"})]
    assert parsed.text == ""


def _end(family: str) -> str:
    """The token the family's reply ends with (as a raw completion keeps it)."""
    return FORMATS[family].stops[0] if family != "gpt-oss" else ""


def _two_calls(family: str, first: str, second: str) -> str:
    """Two calls in one reply, joined as the family joins them."""
    if family in ("kimi-k2", "deepseek-v3", "deepseek-v3.1"):
        opener = "<|tool_calls_section_begin|>" if family == "kimi-k2" else _DS_CALLS_BEGIN
        closer = "<|tool_calls_section_end|>" if family == "kimi-k2" else _DS_CALLS_END
        inner = first.removesuffix(closer) + second.removeprefix(opener)
        return inner
    if family == "gpt-oss":
        return first + "<|start|>assistant" + second
    if family == "llama-3":
        return "<|python_tag|>" + first + "; " + second
    return first + "\n" + second


def _with_reasoning(family: str, thought: str, rest: str) -> str:
    """``rest`` after a reasoning block, written as the family writes one."""
    if family == "gpt-oss":
        return f"<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant{rest}"
    if family == "gemma4":
        return f"<|channel>thought\n{thought}<channel|>{rest}"
    return f"<think>\n{thought}\n</think>\n\n{rest}"


def _answer(family: str, text: str) -> str:
    return f"<|channel|>final<|message|>{text}<|return|>" if family == "gpt-oss" else text


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments)


def _plain(calls: tuple[ToolCall, ...]) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in calls]


# ------------------------------------------------------------------ calls


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_one_call_is_read_as_that_call(family: str) -> None:
    text = call_example(family, "move", {"direction": "down"}) + _end(family)
    parsed = parse_text(family, text, TOOLS)
    assert _plain(parsed.tool_calls) == [("move", {"direction": "down"})]
    assert parsed.errors == ()
    assert parsed.text == ""
    assert _thought(parsed) is None


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_two_calls_are_read_in_order(family: str) -> None:
    first = call_example(family, "move", {"direction": "down", "amount": 2})
    second = call_example(family, "look", {})
    parsed = parse_text(family, _two_calls(family, first, second) + _end(family), TOOLS)
    both = [("move", {"direction": "down", "amount": 2}), ("look", {})]
    # harmony ends a turn at <|call|> (sampling stops there): one call per completion
    assert _plain(parsed.tool_calls) == (both[:1] if family == "gpt-oss" else both)
    assert parsed.errors == ()


@pytest.mark.parametrize("family", [f for f in TEXT_FAMILIES if f != "llama-3"])
def test_a_call_after_reasoning_keeps_the_reasoning_out_of_the_content(family: str) -> None:
    call = call_example(family, "move", {"direction": "up"})
    text = _with_reasoning(family, "The goal is above me.", call) + _end(family)
    parsed = parse_text(family, text, TOOLS)
    assert _plain(parsed.tool_calls) == [("move", {"direction": "up"})]
    assert _thought(parsed) == "The goal is above me."
    assert "goal" not in parsed.text
    assert parsed.errors == ()


@pytest.mark.parametrize("family", [f for f in TEXT_FAMILIES if f != "llama-3"])
def test_a_plain_answer_after_reasoning_is_the_message(family: str) -> None:
    text = _with_reasoning(family, "2 + 2 is 4.", _answer(family, "The answer is 4.")) + _end(
        family
    )
    parsed = parse_text(family, text, TOOLS)
    thought = (ReasoningBlock(text="2 + 2 is 4."),)
    assert parsed == AssistantTurn((), "The answer is 4.", (), thought)


@pytest.mark.parametrize("family", _THINK)
def test_reasoning_opened_by_the_prompt_is_still_reasoning(family: str) -> None:
    # Qwen3.5, GLM-5, MiniMax and DeepSeek prompts end with "<think>": the
    # completion holds only the rest of the block and its "</think>".
    text = "Count the letters.\n</think>\n\nThere are 3." + _end(family)
    parsed = parse_text(family, text, TOOLS)
    assert (parsed.text, _thought(parsed)) == ("There are 3.", "Count the letters.")
    cut = parse_text(family, "Still thinking about", TOOLS, reasoning_prefilled=True)
    assert cut.text == ""
    assert _thought(cut) == "Still thinking about"


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_a_plain_answer_is_content_only(family: str) -> None:
    parsed = parse_text(family, "The answer is 4." + _end(family), TOOLS)
    assert parsed == AssistantTurn((), "The answer is 4.", (), ())


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_end_of_turn_tokens_are_not_content(family: str) -> None:
    for stop in FORMATS[family].stops:
        parsed = parse_text(family, _answer(family, "Done.") + stop, TOOLS)
        assert parsed.text == "Done.", stop


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_the_prose_before_a_call_is_the_message(family: str) -> None:
    call = call_example(family, "move", {"direction": "up"})
    lead = "Going up." if family != "llama-3" else "Going up.<|python_tag|>"
    text = lead + ("<|start|>assistant" + call if family == "gpt-oss" else call)
    if family == "gpt-oss":
        text = "<|channel|>commentary<|message|>Going up.<|end|>" + text
    parsed = parse_text(family, text + _end(family), TOOLS)
    assert _plain(parsed.tool_calls) == [("move", {"direction": "up"})]
    assert parsed.text == "Going up."


# ------------------------------------------------------------------ errors

_MALFORMED = {
    "hermes": ("<tool_call>{'name': 'move'}</tool_call>", "not valid JSON"),
    "qwen3.5": ('<tool_call>\n{"name": "move", "arguments": {}}\n</tool_call>', "<function=NAME>"),
    "glm-4.5": ("<tool_call>move<arg_key>direction</arg_key></tool_call>", "<arg_value>"),
    "glm-5": ("<tool_call>move<arg_key>direction</arg_key></tool_call>", "<arg_value>"),
    "gpt-oss": (
        "<|channel|>commentary to=functions.move <|constrain|>json<|message|>{direction: up}"
        "<|call|>",
        "not valid JSON",
    ),
    "kimi-k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.move:0"
        "<|tool_call_argument_begin|>{direction: up}<|tool_call_end|><|tool_calls_section_end|>",
        "not valid JSON",
    ),
    "minimax-m2": (
        '<minimax:tool_call>\n<call name="move"></call>\n</minimax:tool_call>',
        '<invoke name="NAME">',
    ),
    "gemma4": ('<|tool_call>move{direction:<|"|>up<|"|>}<tool_call|>', "call:NAME{...}"),
    "deepseek-v3": (
        _DS_CALLS_BEGIN + "<\uff5ctool\u2581call\u2581begin\uff5c>move {}"
        "<\uff5ctool\u2581call\u2581end\uff5c>" + _DS_CALLS_END,
        "<\uff5ctool\u2581sep\uff5c>",
    ),
    "deepseek-v3.1": (
        _DS_CALLS_BEGIN + "<\uff5ctool\u2581call\u2581begin\uff5c>move<\uff5ctool\u2581sep\uff5c>"
        "{direction: up}<\uff5ctool\u2581call\u2581end\uff5c>" + _DS_CALLS_END,
        "not valid JSON",
    ),
    "llama-3": ('{"name": "move", "parameters": {"direction": up}}', "not valid JSON"),
}


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_a_malformed_call_is_an_error_in_the_familys_own_format(family: str) -> None:
    text, reason = _MALFORMED[family]
    parsed = parse_text(family, text + _end(family), TOOLS)
    assert parsed.tool_calls == ()
    assert len(parsed.errors) == 1
    error = parsed.errors[0]
    assert reason in error
    if family == "hermes":  # today's Hermes/JSON wording, unchanged
        assert error.endswith('Write tool calls as {"name": ..., "arguments": {...}}')
    else:
        assert error.endswith("Write a call as " + example_call(family, "move", TOOLS))
        assert call_example(family, "move", {"direction": "up"}) in error
    if family in ("qwen3.5", "glm-4.5", "glm-5", "minimax-m2", "gemma4"):
        assert "JSON" not in error  # never tell these models to write JSON


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_a_reply_cut_mid_call_is_an_error_not_a_message(family: str) -> None:
    call = call_example(family, "move", {"direction": "down"})
    cut = call[: call.index("down") + 2]
    parsed = parse_text(family, cut, TOOLS)
    assert parsed.tool_calls == ()
    assert len(parsed.errors) == 1
    assert "do" not in parsed.text
    if family not in ("hermes", "llama-3"):  # JSON-only formats have no closing mark
        assert "not closed" in parsed.errors[0]


@pytest.mark.parametrize("family", ["glm-4.5", "gemma4"])
def test_a_call_to_an_unlisted_tool_is_the_environments_to_answer(family: str) -> None:
    """renderers flags a tool the list does not show; it still goes to the environment, which
    hides its terminal tool from the list and names an unknown tool itself."""
    parsed = parse_text(family, call_example(family, "jump", {"height": 2}), TOOLS)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("jump", {"height": 2})]
    assert parsed.errors == ()


# ------------------------------------------------------------ typed values


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_values_are_typed_by_the_tools_schema(family: str) -> None:
    # XML formats write every value as text: "3" is an integer for "amount",
    # a string for "label", as the schema says.
    call = call_example(family, "move", {"amount": 3, "label": "3"})
    parsed = parse_text(family, call + _end(family), TOOLS)
    assert _plain(parsed.tool_calls) == [("move", {"amount": 3, "label": "3"})]


@pytest.mark.parametrize("family", _XML)
def test_an_xml_value_the_schema_cannot_take_is_an_error(family: str) -> None:
    call = call_example(family, "move", {"amount": "three"})
    parsed = parse_text(family, call, TOOLS)
    assert parsed.tool_calls == ()
    assert "the value of 'amount' for 'move' is not an integer: 'three'" in parsed.errors[0]
    untyped = parse_text(family, call)  # no schema: the text stays text
    assert untyped.tool_calls == (_call("move", amount="three"),)


_VALUES = st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)))


@pytest.mark.parametrize("family", TEXT_FAMILIES)
@settings(max_examples=25, deadline=None)
@given(value=_VALUES)
def test_any_string_value_round_trips_through_the_familys_writer(family: str, value: str) -> None:
    parsed = parse_text(family, call_example(family, "move", {"label": value}), TOOLS)
    expected = value.strip() if family in _XML else value
    assert _plain(parsed.tool_calls) == [("move", {"label": expected})]
    assert parsed.errors == ()


# ---------------------------------------------------- agreement with renderers


@pytest.mark.parametrize(
    "family", ["qwen3.5", "glm-4.5", "glm-5", "kimi-k2", "minimax-m2", "gemma4", "deepseek-v3"]
)
def test_call_example_is_what_renderers_renders(family: str) -> None:
    tokenizer, renderer = renderer_for(family)
    arguments = {"direction": "down", "amount": 3}
    call = {
        "type": "function",
        "id": "functions.move:0",
        "function": {"name": "move", "arguments": arguments},
    }
    messages = [
        {"role": "user", "content": "Go down."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
    ]
    rendered = tokenizer.decode(renderer.render_ids(messages))
    assert call_example(family, "move", arguments) in rendered


def test_aliases_and_unknown_families() -> None:
    call = call_example("qwen3.6", "move", {"direction": "up"})
    assert call == call_example("qwen3.5", "move", {"direction": "up"})
    assert parse_text("qwen3-coder", call).tool_calls == (_call("move", direction="up"),)
    with pytest.raises(ValueError, match=r"unknown wire format 'qwen9'.*qwen3\.5"):
        parse_text("qwen9", "hi")


def test_harmony_recipient_before_the_channel_and_a_missing_call_token() -> None:
    # to= may come in the role header; servers often drop the <|call|> stop token.
    text = ' to=functions.move<|channel|>commentary <|constrain|>json<|message|>{"direction": "up"}'
    parsed = parse_text("gpt-oss", text, TOOLS)
    assert parsed.tool_calls == (_call("move", direction="up"),)


def test_kimi_keeps_the_models_call_id() -> None:
    parsed = parse_text("kimi-k2", call_example("kimi-k2", "move", {"direction": "up"}))
    assert parsed.tool_calls == (ToolCall("move", {"direction": "up"}, "functions.move:0"),)


# ------------------------------------- parity with renderers on real token ids

_SERVED = ("qwen3", "qwen3.5", "qwen3.6", "glm-4.5", "glm-5", "kimi-k2", "minimax-m2")
_SERVED += ("gemma4", "deepseek-v3", "llama-3")  # gpt-oss's renderer needs the network


def _completions(name: str) -> list[str]:
    from tests import _families

    down = ("move", {"direction": "down", "amount": 2})
    cases: list[dict[str, Any]] = [
        {"calls": (down,)},
        {"calls": (), "content": "The answer is 4."},
        {"calls": (down,), "content": "Going down."},
        {"calls": (down,), "think": "The goal is below."},
        {"calls": (), "content": "The answer is 4.", "think": "2 + 2 is 4."},
    ]
    if name != "llama-3":  # its template takes one call per turn
        cases.append({"calls": (down, ("look", {}))})
    out = []
    for case in cases:
        try:
            out.append(_families.completion(name, case.pop("calls"), **case))
        except ValueError:  # a turn the template cannot write (no reasoning block...)
            assert name in ("kimi-k2", "deepseek-v3", "llama-3"), case
    return out


@pytest.mark.parametrize("name", _SERVED)
def test_the_text_parse_agrees_with_renderers_on_the_familys_own_ids(name: str) -> None:
    renderers = pytest.importorskip("renderers")
    from tests import _families

    tokenizer = _families.family_tokenizer(name, local=False)
    renderer = renderers.create_renderer(tokenizer, renderers.config_from_name(name))
    prompt = renderer.render_ids(
        [{"role": "user", "content": "Go down twice."}], tools=TOOLS, add_generation_prompt=True
    )
    for text in _completions(name):
        ids = _families.encode(tokenizer, text)
        theirs = from_parsed_response(
            name, renderer.parse_response(ids, tools=TOOLS, prompt_ids=prompt), TOOLS
        )
        ours = parse_text(name, tokenizer.decode(ids, skip_special_tokens=False), TOOLS)
        assert bool(theirs.tool_calls) == ("move" in text), text
        assert (ours.text, _thought(ours), ours.tool_calls) == (
            theirs.text,
            _thought(theirs),
            theirs.tool_calls,
        ), text
        assert len(ours.errors) == len(theirs.errors) == 0, text


@pytest.mark.parametrize("name", ["gpt-oss", "deepseek-v3.1"])
def test_the_families_renderers_cannot_serve_are_read_from_their_own_ids(name: str) -> None:
    from tests import _families

    tokenizer = _families.family_tokenizer(name, local=False)
    down = ("move", {"direction": "down", "amount": 2})
    for calls, content, think in [
        ((down,), "", None),
        ((down,), "", "The goal is below."),
        ((), "The answer is 4.", "2 + 2 is 4."),
        ((down, ("look", {})), "", None),
    ]:
        if name == "gpt-oss" and len(calls) > 1:
            continue  # sampling stops at its first <|call|>
        text = _families.completion(name, calls, content=content, think=think)
        ids = _families.encode(tokenizer, text)
        parsed = parse_text(name, tokenizer.decode(ids, skip_special_tokens=False), TOOLS)
        assert _plain(parsed.tool_calls) == list(calls), text
        assert (parsed.text, _thought(parsed), parsed.errors) == (content, think, ()), text


def _thought(turn: AssistantTurn) -> str | None:
    """The turn's reasoning as one text (None when it has none)."""
    return "\n".join(b.text for b in turn.reasoning) if turn.reasoning else None
