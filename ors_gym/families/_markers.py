"""Each family's special tokens, and a tokenizer of raw text over them.

renderers parses a completion from token ids. Its renderers accept any object
with the :class:`renderers.Tokenizer` surface (a "bring your own" adapter is
documented there), so :class:`MarkerTokenizer` turns raw completion text into
ids in which each of the family's special tokens is one id and every other
character is one id: renderers' own parsers then read text exactly as they
read a real tokenizer's ids, and the two paths cannot drift apart.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ors_gym.families._table import FAMILIES

_CHAR_BASE = 1_000  # ids below it are markers (0 is the unknown token)


class MarkerTokenizer:
    """Text <-> ids: the given markers are single ids, other characters one id each."""

    unk_token_id: int = 0
    chat_template: str = ""

    def __init__(self, name: str, markers: Sequence[str], eos: str) -> None:
        self.name_or_path = f"ors-gym/{name}-text"
        self._markers = tuple(dict.fromkeys(markers))
        assert len(self._markers) < _CHAR_BASE
        self._ids = {marker: i + 1 for i, marker in enumerate(self._markers)}
        self.eos_token_id = self._ids[eos]
        by_length = sorted(self._markers, key=len, reverse=True)
        self._split = re.compile("|".join(map(re.escape, by_length)))

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        ids: list[int] = []
        pos = 0
        for match in self._split.finditer(text):
            ids.extend(_CHAR_BASE + ord(c) for c in text[pos : match.start()])
            ids.append(self._ids[match.group()])
            pos = match.end()
        ids.extend(_CHAR_BASE + ord(c) for c in text[pos:])
        return ids

    def decode(self, token_ids: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        markers = self._markers
        return "".join(
            chr(i - _CHAR_BASE) if i >= _CHAR_BASE else markers[i - 1] if i else ""
            for i in token_ids
        )

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._ids.get(tokens, self.unk_token_id)
        return [self._ids.get(token, self.unk_token_id) for token in tokens]


def _deepseek(name: str) -> str:
    return "<\uff5c" + name.replace("_", "\u2581") + "\uff5c>"


@dataclass(frozen=True)
class FamilyFormat:
    """What the text parsers need to know of one family's wire format."""

    markers: tuple[str, ...]  # its special tokens (each one token in its tokenizer)
    eos: str
    stops: tuple[str, ...]  # end-of-turn tokens: the reply ends at the first
    think: tuple[str, str] | None  # (opener, closer) of its reasoning block
    call_open: str  # how a call starts and ends, for error messages
    call_close: str


_QWEN = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>")
_QWEN_EXTRA = ("<tool_response>", "</tool_response>", "<|vision_start|>", "<|vision_end|>")
_GLM = (
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
    "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
    "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>",
)  # fmt: skip
_GLM_STOPS = ("<|endoftext|>", "<|user|>", "<|observation|>")
_DEEPSEEK = tuple(
    _deepseek(name)
    for name in (
        "begin_of_sentence", "end_of_sentence", "User", "Assistant", "tool_calls_begin",
        "tool_calls_end", "tool_call_begin", "tool_call_end", "tool_sep",
        "tool_outputs_begin", "tool_outputs_end", "tool_output_begin", "tool_output_end",
    )
)  # fmt: skip
_THINK = ("<think>", "</think>")

FORMATS: dict[str, FamilyFormat] = {
    "hermes": FamilyFormat(
        (*_QWEN, "<tool_call>", "</tool_call>"), "<|im_end|>", ("<|im_end|>", "<|endoftext|>"),
        _THINK, "<tool_call>", "</tool_call>",
    ),
    "qwen3.5": FamilyFormat(
        (*_QWEN, "<tool_call>", "</tool_call>", *_QWEN_EXTRA, "<|image_pad|>", "<|video_pad|>"),
        "<|im_end|>", ("<|im_end|>", "<|endoftext|>"), _THINK, "<tool_call>", "</tool_call>",
    ),
    "glm-4.5": FamilyFormat(
        _GLM, "<|endoftext|>", _GLM_STOPS, _THINK, "<tool_call>", "</tool_call>"
    ),
    "glm-5": FamilyFormat(
        _GLM, "<|endoftext|>", _GLM_STOPS, _THINK, "<tool_call>", "</tool_call>"
    ),
    "gpt-oss": FamilyFormat(
        ("<|start|>", "<|end|>", "<|return|>", "<|call|>", "<|channel|>", "<|message|>",
         "<|constrain|>", "<|endoftext|>"),
        "<|return|>", ("<|return|>", "<|endoftext|>"), None,
        "<|channel|>commentary to=functions.NAME", "<|call|>",
    ),
    "kimi-k2": FamilyFormat(
        ("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>",
         "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
        "<|im_end|>", ("<|im_end|>",), _THINK, "<|tool_call_begin|>", "<|tool_call_end|>",
    ),
    "minimax-m2": FamilyFormat(
        ("]~!b[", "]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>",
         "</minimax:tool_call>"),
        "[e~[", ("[e~[",), _THINK, "<minimax:tool_call>", "</minimax:tool_call>",
    ),
    "gemma4": FamilyFormat(
        ("<bos>", "<eos>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>",
         "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
         "<tool_response|>", "<|image>", "<|image|>", "<image|>", '<|"|>'),
        "<eos>", ("<turn|>", "<|tool_response>", "<eos>"), ("<|channel>thought\n", "<channel|>"),
        "<|tool_call>", "<tool_call|>",
    ),
    "deepseek-v3": FamilyFormat(
        _DEEPSEEK, _deepseek("end_of_sentence"), (_deepseek("end_of_sentence"),), _THINK,
        _deepseek("tool_call_begin"), _deepseek("tool_call_end"),
    ),
    "deepseek-v3.1": FamilyFormat(
        _DEEPSEEK, _deepseek("end_of_sentence"), (_deepseek("end_of_sentence"),), _THINK,
        _deepseek("tool_call_begin"), _deepseek("tool_call_end"),
    ),
    "llama-3": FamilyFormat(
        ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
         "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>"),
        "<|eot_id|>", ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"), None, "{", "}",
    ),
}  # fmt: skip


#: Other names of the same wire formats (renderers' config names among them): every family
#: of the table whose text parser has another name.
ALIASES: dict[str, str] = {
    name: fam.text for name, fam in FAMILIES.items() if fam.text is not None and fam.text != name
}


def family_name(family: str) -> str:
    """The family ``family`` names (an alias resolved); ValueError if unknown."""
    name = ALIASES.get(family, family)
    if name not in FORMATS:
        raise ValueError(
            f"unknown tool-call family {family!r}; known families: {', '.join(FORMATS)} "
            f"(or the aliases {', '.join(sorted(ALIASES))})"
        )
    return name


def cut_at_stop(family: str, text: str) -> str:
    """``text`` up to the family's first end-of-turn token."""
    for stop in FORMATS[family].stops:
        at = text.find(stop)
        if at != -1:
            text = text[:at]
    return text


@functools.cache
def marker_tokenizer(family: str) -> MarkerTokenizer:
    """The :class:`MarkerTokenizer` of ``family``'s special tokens."""
    fmt = FORMATS[family]
    return MarkerTokenizer(family, fmt.markers, fmt.eos)


@functools.cache
def renderer_for(family: str) -> tuple[MarkerTokenizer, Any]:
    """(marker tokenizer, renderers renderer) that parse ``family``'s text."""
    try:
        import renderers
    except ImportError as exc:
        raise ImportError(
            f"reading the {family!r} tool-call format needs the renderers library: "
            "pip install 'ors-gym[tokens]'"
        ) from exc
    tokenizer = marker_tokenizer(family)
    return tokenizer, renderers.create_renderer(tokenizer, renderers.config_from_name(family))
