"""The model families: one row each, mapping a family to its renderer and wire format.

A row names the ``renderers`` renderer that renders and parses the family's tokens,
the wire format (``_formats``) its completions are read by, how its chat template
reads an assistant turn, and the markers its template writes (its fingerprint, to
tell a local checkpoint's family from its template). A new model family of a known
format is one row here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ors_gym.families._formats import DS, FORMATS

if TYPE_CHECKING:
    from ors_gym.actions import AssistantTurn

__all__ = ["FAMILIES", "Family", "format_name"]


@dataclass(frozen=True)
class Family:
    """One model family.

    ``renderer``: the ``renderers`` name that renders and parses its tokens, or None
    where none serves it (its chat template renders and its format's reader parses).
    ``format``: its wire format's name (:data:`~ors_gym.families._formats.FORMATS`), or
    None where only its renderer reads it. ``reasoning_field`` and
    ``string_arguments``: how its chat template reads an assistant turn (the field that
    holds the reasoning; call arguments as a JSON string rather than an object).
    ``read_text``: its completions are read by the format's reader even where its
    renderer serves (Llama 3: the renderer takes a broken JSON call for a plain reply).
    ``fingerprint``: markers its chat template writes, all of them, and ``unless``: ones
    it never writes; rows are tried in table order, the most specific first.
    """

    name: str
    renderer: str | None
    format: str | None
    reasoning_field: str = "reasoning_content"
    string_arguments: bool = False
    read_text: bool = False
    fingerprint: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()

    def assistant_message(self, turn: AssistantTurn) -> dict[str, Any]:
        """The turn as the chat message this family's template renders (content, reasoning
        in the template's field, calls with their arguments as the template reads them)."""
        message: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if turn.reasoning:
            message[self.reasoning_field] = "\n".join(b.text for b in turn.reasoning)
            if self.reasoning_field == "thinking" and turn.tool_calls and turn.text:
                # harmony's template writes a calling turn's text in its analysis channel
                # and refuses both fields: the reasoning, then the text, as the one analysis
                message["thinking"] += "\n\n" + message.pop("content")
                message["content"] = ""
        if turn.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": (
                     json.dumps(c.arguments) if self.string_arguments else c.arguments)}}
                for c in turn.tool_calls
            ]
        return message


def _families(*rows: Family) -> dict[str, Family]:
    return {row.name: row for row in rows}


_QWEN35_FP = ("<tool_call>", "<function=", "<parameter=")

#: Every family by name: the ``renderers`` names, plus the families renderers cannot serve.
#: Rows with a fingerprint are tried in this order when a template is read.
FAMILIES: dict[str, Family] = _families(
    Family("deepseek-v3.1", None, "deepseek-v3.1", string_arguments=True, fingerprint=(DS.SEP,),
           unless=("```json",)),
    Family("deepseek-r1", "deepseek-r1", "deepseek-v3", string_arguments=True,
           fingerprint=(DS.SEP, "```json", "<think>")),
    Family("deepseek-v3", "deepseek-v3", "deepseek-v3", string_arguments=True,
           fingerprint=(DS.SEP, "```json")),
    Family("glm-5", "glm-5", "glm-5", fingerprint=("<arg_key>", "clear_thinking")),
    Family("glm-4.5", "glm-4.5", "glm-4.5", fingerprint=("<arg_key>",)),
    Family("gpt-oss", "gpt-oss", "gpt-oss", "thinking",
           fingerprint=("<|channel|>", "<|message|>", "<|call|>")),
    Family("kimi-k2", "kimi-k2", "kimi-k2", fingerprint=("<|tool_calls_section_begin|>",)),
    Family("minimax-m2", "minimax-m2", "minimax-m2", fingerprint=("<minimax:tool_call>",)),
    Family("gemma4", "gemma4", "gemma4", fingerprint=("<|tool_call>",)),
    Family("qwen3.6", "qwen3.6", "qwen3.5", fingerprint=(*_QWEN35_FP, "preserve_thinking")),
    Family("qwen3.5", "qwen3.5", "qwen3.5", fingerprint=_QWEN35_FP),
    Family("llama-3", "llama-3", "llama-3", read_text=True,
           fingerprint=("<|start_header_id|>", "<|eot_id|>")),
    Family("qwen3", "qwen3", "hermes", fingerprint=("<tool_call>", "<|im_start|>")),
    Family("hermes", None, "hermes"),
    Family("qwen2.5", None, "hermes"),
    Family("qwen3-coder", None, "qwen3.5"),
    Family("qwen3-vl", "qwen3-vl", "hermes"),
    Family("prime-qwen3", "prime-qwen3", "qwen3.5"),
    Family("qwen3.8", "qwen3.8", "qwen3.5"),
    Family("glm-4.7", "glm-5", "glm-5"),
    Family("glm-5.1", "glm-5.1", "glm-5"),
    Family("glm-5.3", "glm-5.3", "glm-5"),
    Family("kimi-k2.5", "kimi-k2.5", "kimi-k2"),
    Family("llama-3.1", "llama-3", "llama-3", read_text=True),
    Family("llama-3.2", "llama-3", "llama-3", read_text=True),
    # Nemotron 3 writes Qwen3.5's calls (renderers reads it with the same parser).
    Family("nemotron-3", "nemotron-3", "qwen3.5"),
    Family("nemotron-3-ultra", "nemotron-3-ultra", "qwen3.5"),
    Family("nemotron-3.5", "nemotron-3.5", "qwen3.5"),
    # Formats only their renderers read (token ids, TokenEnv); no text reader of ours.
    Family("deepseek-v4", "deepseek-v4", None),
    Family("hy3", "hy3", None),
    Family("inkling", "inkling", None),
    Family("laguna-xs.2", "laguna-xs.2", None),
    Family("laguna-m.1", "laguna-m.1", None),
    Family("laguna-xs-2.1", "laguna-xs-2.1", None),
    Family("laguna-s-2.1", "laguna-s-2.1", None),
)


def format_name(name: str) -> str:
    """The wire format ``name`` reads as (a format's own name, or a family's format);
    ValueError if it names neither, or a family only its renderer reads."""
    if name in FORMATS:
        return name
    fam = FAMILIES.get(name)
    if fam is not None and fam.format is not None:
        return fam.format
    readable = sorted(n for n, f in FAMILIES.items() if f.format is not None)
    raise ValueError(
        f"unknown wire format {name!r}; known formats: {', '.join(FORMATS)} (or the model "
        f"families {', '.join(readable)})"
    )
