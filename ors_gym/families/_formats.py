"""The wire formats: one row each, all a format's facts in it.

A wire format is how a model writes a turn: its special tokens, the tokens a turn
ends on, its reasoning block, how a tool call is framed, what to tell the model
when it wrote a call badly, and one call written out (the example shown with
each such note, and in system prompts). Several model families share a format
(``_table`` maps each family to its format); a new format is one row here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DS", "FORMATS", "WireFormat"]

Example = Callable[[str, dict[str, Any]], str]


@dataclass(frozen=True)
class WireFormat:
    """One wire format.

    ``markers``: its special tokens (one token each in its tokenizers); ``eos`` the one
    that ends a sequence. ``stops``: the tokens a turn ends on (sampling stops at the
    first; a completion's text is cut there). ``ends``: the tokens its template ends a
    turn with in history, where they are not simply the template's first special token
    after a turn's text (then ``stops[0]`` closes a cut completion); None reads that
    token from the template. ``think``: its reasoning block's (opener, closer).
    ``call_open``/``call_close``: a call's framing, ``missing_name``/``malformed``: the
    notes on a call with no name or a broken frame. ``example(name, arguments)``: one
    call written out. ``reader``: what reads its text (``"renderers"``: renderers'
    parser of the same name over the markers; ``"hermes"``, ``"harmony"``,
    ``"deepseek-v3.1"``, ``"llama-3"``: ours). ``text_values``: call arguments are
    written as text, typed by the tool's schema. ``empty_think``: its renderer reads a
    reply as reasoning until the closer, so an unopened reply gets an empty block.
    """

    name: str
    markers: tuple[str, ...]
    eos: str
    stops: tuple[str, ...]
    think: tuple[str, str] | None
    call_open: str
    call_close: str
    missing_name: str
    malformed: str
    example: Example
    reader: str = "renderers"
    ends: tuple[str, ...] | None = None
    text_values: bool = False
    empty_think: bool = False
    bad_json: str | None = None  # the note on unreadable arguments, where JSON is not it


def ds(name: str) -> str:
    """A DeepSeek special token: full-width bars, a lower one-eighth block for spaces."""
    return "<\uff5c" + name.replace("_", "\u2581") + "\uff5c>"


class DS:
    """DeepSeek's tool-call tokens, written once."""

    EOS = ds("end_of_sentence")
    CALLS_BEGIN = ds("tool_calls_begin")
    CALLS_END = ds("tool_calls_end")
    CALL_BEGIN = ds("tool_call_begin")
    CALL_END = ds("tool_call_end")
    SEP = ds("tool_sep")
    MARKERS = tuple(ds(n) for n in (
        "begin_of_sentence", "end_of_sentence", "User", "Assistant", "tool_calls_begin",
        "tool_calls_end", "tool_call_begin", "tool_call_end", "tool_sep",
        "tool_outputs_begin", "tool_outputs_end", "tool_output_begin", "tool_output_end",
    ))  # fmt: skip


# ----------------------------------------------------------------- example writers


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text(value: Any) -> str:
    """A text-format value: strings verbatim, anything else as JSON."""
    return value if isinstance(value, str) else _json(value)


def _sorted(arguments: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return sorted(arguments.items(), key=lambda item: str(item[0]).lower())


def _gemma_value(value: Any) -> str:
    """Gemma 4's argument syntax: strings between <|"|> marks, bare keys."""
    if isinstance(value, str):
        return f'<|"|>{value}<|"|>'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_gemma_value(v)}" for k, v in _sorted(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_gemma_value(v) for v in value) + "]"
    return _json(value)


def _hermes(name: str, args: dict[str, Any]) -> str:
    return f"<tool_call>\n{_json({'name': name, 'arguments': args})}\n</tool_call>"


def _qwen35(name: str, args: dict[str, Any]) -> str:
    params = "".join(f"<parameter={k}>\n{_text(v)}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _glm(sep: str) -> Example:
    def write(name: str, args: dict[str, Any]) -> str:
        pairs = "".join(f"{sep}<arg_key>{k}</arg_key>{sep}<arg_value>{_text(v)}</arg_value>"
                        for k, v in args.items())
        return f"<tool_call>{name}{pairs}{sep}</tool_call>"

    return write


def _harmony(name: str, args: dict[str, Any]) -> str:
    return (f"<|channel|>commentary to=functions.{name} <|constrain|>json"
            f"<|message|>{_json(args)}<|call|>")


def _kimi(name: str, args: dict[str, Any]) -> str:
    return (f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0"
            f"<|tool_call_argument_begin|>{_json(args)}<|tool_call_end|>"
            "<|tool_calls_section_end|>")


def _minimax(name: str, args: dict[str, Any]) -> str:
    params = "".join(f'<parameter name="{k}">{_text(v)}</parameter>\n' for k, v in args.items())
    return f'<minimax:tool_call>\n<invoke name="{name}">\n{params}</invoke>\n</minimax:tool_call>'


def _gemma(name: str, args: dict[str, Any]) -> str:
    fields = ",".join(f"{k}:{_gemma_value(v)}" for k, v in _sorted(args))
    return f"<|tool_call>call:{name}{{{fields}}}<tool_call|>"


def _deepseek_v3(name: str, args: dict[str, Any]) -> str:
    return (f"{DS.CALLS_BEGIN}{DS.CALL_BEGIN}function{DS.SEP}{name}\n```json\n"
            f"{_json(args)}\n```{DS.CALL_END}{DS.CALLS_END}")


def _deepseek_v31(name: str, args: dict[str, Any]) -> str:
    return f"{DS.CALLS_BEGIN}{DS.CALL_BEGIN}{name}{DS.SEP}{_json(args)}{DS.CALL_END}{DS.CALLS_END}"


def _llama3(name: str, args: dict[str, Any]) -> str:
    return _json({"name": name, "parameters": args})


# ------------------------------------------------------------------------ the rows

_THINK = ("<think>", "</think>")
_QWEN = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
         "</tool_call>")
_QWEN_STOPS = ("<|im_end|>", "<|endoftext|>")
_GLM = (
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
    "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
    "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>",
)  # fmt: skip
_GLM_STOPS = ("<|endoftext|>", "<|user|>", "<|observation|>")
_GLM_NAME = "the tool's name comes first inside <tool_call>"
_GLM_BROKEN = "an <arg_key> is not followed by </arg_key>, <arg_value> and </arg_value>"
_DS_BROKEN = f"a call has no {DS.SEP}"


def _rows(*rows: WireFormat) -> dict[str, WireFormat]:
    return {row.name: row for row in rows}


#: Every wire format by name.
FORMATS: dict[str, WireFormat] = _rows(
    WireFormat(
        "hermes", _QWEN, "<|im_end|>", _QWEN_STOPS, _THINK, "<tool_call>", "</tool_call>",
        'give it a "name"', "the <tool_call> body is not a JSON call", _hermes, reader="hermes",
    ),
    WireFormat(
        "qwen3.5",
        (*_QWEN, "<tool_response>", "</tool_response>", "<|vision_start|>", "<|vision_end|>",
         "<|image_pad|>", "<|video_pad|>"),
        "<|im_end|>", _QWEN_STOPS, _THINK, "<tool_call>", "</tool_call>",
        "write <function=NAME> inside <tool_call>", "the <tool_call> body has no <function=NAME>",
        _qwen35, text_values=True,
    ),
    WireFormat(
        "glm-4.5", _GLM, "<|endoftext|>", _GLM_STOPS, _THINK, "<tool_call>", "</tool_call>",
        _GLM_NAME, _GLM_BROKEN, _glm("\n"), text_values=True, empty_think=True,
    ),
    WireFormat(
        "glm-5", _GLM, "<|endoftext|>", _GLM_STOPS, _THINK, "<tool_call>", "</tool_call>",
        _GLM_NAME, _GLM_BROKEN, _glm(""), text_values=True, empty_think=True,
    ),
    WireFormat(  # harmony: a turn ends at <|call|> or <|return|> (what sampling stops on)
        "gpt-oss",
        ("<|start|>", "<|end|>", "<|return|>", "<|call|>", "<|channel|>", "<|message|>",
         "<|constrain|>", "<|endoftext|>"),
        "<|return|>", ("<|return|>", "<|call|>"), None,
        "<|channel|>commentary to=functions.NAME", "<|call|>",
        "address it to=functions.NAME",
        "the <|channel|>commentary to=functions.NAME block is not a call", _harmony,
        reader="harmony", ends=("<|call|>", "<|return|>", "<|end|>"),
    ),
    WireFormat(
        "kimi-k2",
        ("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>",
         "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
        "<|im_end|>", ("<|im_end|>",), _THINK, "<|tool_call_begin|>", "<|tool_call_end|>",
        "write functions.NAME:0 before <|tool_call_argument_begin|>",
        "a <|tool_call_begin|> has no <|tool_call_argument_begin|>", _kimi,
    ),
    WireFormat(
        "minimax-m2",
        ("]~!b[", "]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>",
         "</minimax:tool_call>"),
        "[e~[", ("[e~[",), _THINK, "<minimax:tool_call>", "</minimax:tool_call>",
        'write <invoke name="NAME">',
        'the <minimax:tool_call> block has no <invoke name="NAME">...</invoke>', _minimax,
        ends=("[e~[",), text_values=True,
    ),
    WireFormat(
        "gemma4",
        ("<bos>", "<eos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>",
         "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
         "<tool_response|>", "<|image>", "<|image|>", "<image|>", '<|"|>'),
        "<eos>", ("<turn|>", "<|tool_response>", "<eos>"), ("<|channel>thought\n", "<channel|>"),
        "<|tool_call>", "<tool_call|>", "write call:NAME{...}",
        "the <|tool_call> body is not call:NAME{...}", _gemma,
        bad_json='not a {key:value,...} object (strings go between <|"|> marks)',
    ),
    WireFormat(
        "deepseek-v3", DS.MARKERS, DS.EOS, (DS.EOS,), _THINK, DS.CALL_BEGIN, DS.CALL_END,
        f"write the name after {DS.SEP}", _DS_BROKEN, _deepseek_v3, ends=(DS.EOS,),
    ),
    WireFormat(
        "deepseek-v3.1", DS.MARKERS, DS.EOS, (DS.EOS,), _THINK, DS.CALL_BEGIN, DS.CALL_END,
        f"write the name before {DS.SEP}", _DS_BROKEN, _deepseek_v31, reader="deepseek-v3.1",
        ends=(DS.EOS,),
    ),
    WireFormat(
        "llama-3",
        ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
         "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>"),
        "<|eot_id|>", ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"), None, "{", "}",
        'give it a "name"', "the text after <|python_tag|> is not a JSON call", _llama3,
        reader="llama-3",
    ),
)
