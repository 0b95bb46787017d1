"""A model family's raw completion text -> its message, reasoning and tool calls.

Each family writes its calls its own way (Qwen3.5's ``<function=...>`` XML,
GLM's ``<arg_key>`` pairs, harmony's ``commentary to=functions.NAME``...).
Where the ``renderers`` library parses a family, :func:`parse_text` runs that
library's own parser over the text (see :mod:`ors_gym.families._markers`), so
the text path and the token path read a completion alike; DeepSeek V3.1
(which renderers has no parser for), Llama 3's ``<|python_tag|>`` and the
Hermes/JSON default are read here. Badly written calls become agent-facing
errors in the family's own terms, ending with how that family writes a call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ors_gym.actions import AssistantTurn, ToolCall, parse_action
from ors_gym.families._examples import call_example, example_call
from ors_gym.families._formats import FORMATS
from ors_gym.families._markers import cut_at_stop
from ors_gym.families._native import Attempt, Reply, parse_deepseek_v31, parse_llama3
from ors_gym.families._table import format_name
from ors_gym.protocol import ReasoningBlock

__all__ = ["call_example", "from_parsed_response", "parse_text"]


def _turn(
    content: str, reasoning: str | None, calls: Sequence[ToolCall], errors: Sequence[str]
) -> AssistantTurn:
    """The turn a family's reply reads as (its reasoning, if any, as one block)."""
    blocks = (ReasoningBlock(text=reasoning),) if reasoning else ()
    return AssistantTurn(tuple(calls), content, tuple(errors), blocks)


def parse_text(
    fmt: str,
    text: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    reasoning_prefilled: bool | None = None,
) -> AssistantTurn:
    """Read one completion ``text`` (special tokens kept) in wire format ``fmt`` (a
    format's name, or a model family's: its format).

    ``tools`` (OpenAI function-tool dicts) types the values of the XML formats
    by each parameter's schema. ``reasoning_prefilled`` says whether the prompt
    opened the reasoning block (Qwen3.5, GLM-5, MiniMax, DeepSeek prompts end
    with ``<think>``); ``None`` infers it: a closing ``</think>`` with no
    opener before it means the prompt opened it.
    """
    fmt = format_name(fmt)
    reader = FORMATS[fmt].reader
    text = cut_at_stop(fmt, text, keep=reader == "harmony")
    tool_list = [dict(tool) for tool in tools] if tools else None
    if reader == "hermes":
        return _parse_hermes(text, reasoning_prefilled)
    if reader == "harmony":
        parsed, cut = _parse_harmony(text)
        result = from_parsed_response(fmt, parsed, tool_list)
        broke = cut and parsed.tool_calls and str(parsed.tool_calls[-1].status) != "ok"
        if broke:  # the last call's JSON broke off with the reply
            last = _problem(fmt, Attempt("unclosed_block", None, None, ""), tool_list)
            example = example_call(fmt, parsed.tool_calls[-1].name, tool_list)
            notes = (
                *result.errors[:-1],
                f"could not parse tool call: {last}. Write a call as {example}",
            )
            return replace(result, errors=notes)
        return result
    if reader == "llama-3":
        return _finish(fmt, parse_llama3(text), tool_list)
    text = _explicit_reasoning(fmt, text, reasoning_prefilled)
    if reader == "deepseek-v3.1":
        return _finish(fmt, parse_deepseek_v31(text), tool_list)
    from ors_gym.families._markers import renderer_for

    tokenizer, renderer = renderer_for(fmt)
    parsed = renderer.parse_response(tokenizer.encode(text), tools=tool_list)
    return from_parsed_response(fmt, parsed, tool_list)


def from_parsed_response(
    fmt: str, parsed: Any, tools: Sequence[Mapping[str, Any]] | None = None
) -> AssistantTurn:
    """A renderers ``ParsedResponse`` as an :class:`AssistantTurn` of format ``fmt``.

    Calls whose status is not ``ok`` become errors in the format's own terms.
    """
    fmt = format_name(fmt)
    attempts = tuple(
        Attempt(
            status=str(call.status),
            name=call.name,
            arguments=call.arguments,
            raw=call.raw,
            id=call.id,
        )
        for call in parsed.tool_calls
    )
    reasoning = parsed.reasoning_content
    reply = Reply(parsed.content.strip(), reasoning.strip() if reasoning else reasoning, attempts)
    return _finish(fmt, reply, tools)


# ------------------------------------------------------------------ reasoning


def _explicit_reasoning(fmt: str, text: str, prefilled: bool | None) -> str:
    """``text`` with the reasoning block the prompt opened written out.

    renderers tells a prompt-opened block from the prompt's ids; here only the
    completion is known, so the opener is put back in front when the prompt
    opened it, and GLM (whose renderer reads a reply as reasoning until
    ``</think>``) gets an empty block when it did not.
    """
    row = FORMATS[fmt]
    think = row.think
    if think is None:
        return text
    opener, closer = think
    head = text.lstrip()
    if head.startswith(opener):
        return text
    if prefilled is None:
        close = text.find(closer)
        prefilled = close != -1 and opener not in text[:close]
    if prefilled:
        return opener + text
    if row.empty_think:
        return opener + closer + text
    return text


def _split_think(text: str, prefilled: bool | None) -> tuple[str | None, str]:
    """(reasoning, rest) of a ``<think>``-block reply (the Hermes family's)."""
    head = text.lstrip()
    explicit = head.startswith("<think>")
    close = text.find("</think>")
    if prefilled is None:
        prefilled = close != -1 and "<think>" not in text[:close]
    if not (explicit or prefilled):
        return None, text
    body = head[len("<think>") :] if explicit else text
    reasoning, closed, rest = body.partition("</think>")
    if not closed:
        return reasoning.strip(), ""
    return reasoning.strip(), rest


def _parse_hermes(text: str, prefilled: bool | None) -> AssistantTurn:
    reasoning, rest = _split_think(text, prefilled)
    turn = parse_action(rest)
    return _turn(turn.text, reasoning, turn.tool_calls, turn.errors)


def _parse_harmony(text: str) -> tuple[Any, bool]:
    """renderers' harmony parser over ``text`` (the gpt-oss renderer itself needs
    harmony's vocabulary from the network; its parser does not), and whether
    the reply ended inside a call."""
    from renderers import ParsedResponse

    from ors_gym._compat.renderers import harmony_parser
    from ors_gym.families._markers import marker_tokenizer

    if "<|message|>" not in text:  # no harmony message: the whole reply is text
        return ParsedResponse(content=text.strip()), False
    if not text.lstrip().startswith("<|start|>"):  # the prompt ends "<|start|>assistant"
        text = "<|start|>assistant" + text
    last = text.rfind("<|start|>")
    cut = " to=" in text[last : text.find("<|message|>", last)] and not text.rstrip().endswith(
        ("<|call|>", "<|end|>")
    )
    if cut:  # a call whose closing <|call|> (a stop token) the server may have left out
        text = text.rstrip() + "<|call|>"
    tokenizer = marker_tokenizer("gpt-oss")
    ids = {m: tokenizer.convert_tokens_to_ids(m) for m in FORMATS["gpt-oss"].markers}
    parsed = harmony_parser()(
        tokenizer,
        tokenizer.encode(text),
        return_id=ids["<|return|>"],
        call_id=ids["<|call|>"],
        start_id=ids["<|start|>"],
        end_id=ids["<|end|>"],
        channel_id=ids["<|channel|>"],
        message_id=ids["<|message|>"],
        constrain_id=ids["<|constrain|>"],
    )
    return parsed, cut


# --------------------------------------------------------------------- errors


def _finish(fmt: str, reply: Reply, tools: Sequence[Mapping[str, Any]] | None) -> AssistantTurn:
    calls: list[ToolCall] = []
    errors: list[str] = []
    for attempt in reply.attempts:
        problem = _problem(fmt, attempt, tools)
        if problem is None:
            assert isinstance(attempt.arguments, dict) and attempt.name
            calls.append(ToolCall(attempt.name, dict(attempt.arguments), attempt.id))
        else:
            example = example_call(fmt, attempt.name, tools)
            errors.append(f"could not parse tool call: {problem}. Write a call as {example}")
    return _turn(reply.content, reply.reasoning, calls, errors)


def _problem(
    fmt: str, attempt: Attempt, tools: Sequence[Mapping[str, Any]] | None
) -> str | None:
    """What is wrong with one call attempt, in the format's terms, or None."""
    row = FORMATS[fmt]
    name = attempt.name
    status = attempt.status
    if status == "unclosed_block":
        return f"the call is not closed with {row.call_close} (the reply ended inside it)"
    if status == "missing_name" or (status != "malformed_structure" and not name):
        return f"the call names no tool ({row.missing_name})"
    if status == "malformed_structure":
        return row.malformed
    if status == "unknown_tool" and not isinstance(attempt.arguments, dict):
        known = ", ".join(sorted(_tool_names(tools))) or "none"
        return f"there is no tool named {name!r} (the tools are: {known})"
    # A tool the list does not show is still the environment's to answer: an ORS terminal
    # tool is hidden from the list, and the environment names unknown tools itself.
    if row.text_values and isinstance(attempt.arguments, dict):
        return _untyped_value(name, attempt.arguments, tools)
    if status == "invalid_json":
        if row.bad_json is not None:
            return f"the arguments of {name!r} are {row.bad_json}"
        return f"the arguments of {name!r} are not valid JSON: {_clip(attempt.raw)}"
    if not isinstance(attempt.arguments, dict):
        return f"the arguments of {name!r} are not a JSON object: {_clip(attempt.raw)}"
    return None


def _untyped_value(
    name: str | None, arguments: Mapping[str, Any], tools: Sequence[Mapping[str, Any]] | None
) -> str | None:
    """An XML-format value left as text where the tool's schema wants another type."""
    params = _params(name, tools)
    for key, value in arguments.items():
        schema = params.get(key)
        if not isinstance(value, str) or not isinstance(schema, Mapping):
            continue
        if _allows_string(schema):
            continue
        wanted = schema.get("type") or "a non-string value"
        return f"the value of {key!r} for {name!r} is not {_article(wanted)}: {_clip(value)}"
    return None


def _allows_string(schema: Mapping[str, Any]) -> bool:
    declared = schema.get("type")
    if declared is None and not (schema.get("anyOf") or schema.get("oneOf")):
        return True  # an untyped parameter takes any value
    if declared == "string" or (isinstance(declared, list) and "string" in declared):
        return True
    branches = schema.get("anyOf") or schema.get("oneOf") or []
    return any(isinstance(b, Mapping) and _allows_string(b) for b in branches)


def _article(wanted: Any) -> str:
    text = wanted if isinstance(wanted, str) else " or ".join(map(str, wanted))
    return f"an {text}" if text[:1] in "aeiou" else f"a {text}"


def _tool_specs(tools: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    specs = []
    for tool in tools or ():
        spec = tool.get("function", tool)
        if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
            specs.append(spec)
    return specs


def _tool_names(tools: Sequence[Mapping[str, Any]] | None) -> list[str]:
    return [spec["name"] for spec in _tool_specs(tools)]


def _params(name: str | None, tools: Sequence[Mapping[str, Any]] | None) -> Mapping[str, Any]:
    for spec in _tool_specs(tools):
        if spec["name"] == name:
            props = (spec.get("parameters") or {}).get("properties")
            return props if isinstance(props, Mapping) else {}
    return {}


def _clip(raw: str | None, limit: int = 120) -> str:
    raw = (raw or "").strip()
    return repr(raw if len(raw) <= limit else raw[: limit - 3] + "...")
