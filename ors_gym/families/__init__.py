"""Model families and wire formats: how each model writes its tool calls and reasoning.

A model family (Qwen3, Qwen3.5, GLM, gpt-oss, Kimi, MiniMax, Gemma, DeepSeek,
Llama...) writes its turns in a wire format (:class:`WireFormat`, one row each in
:data:`FORMATS`: its markers, turn ends, reasoning block, call framing, error notes
and example writer); several families share one. Reading one family's output by
another's rules trains the model against itself. A :class:`Family` (one row each in
:data:`FAMILIES`) names the ``renderers`` renderer that renders and parses the
family's tokens (where one serves it offline) and the format its raw completion text
is read by (the text path, and the token path where no renderer serves).
:func:`detect` finds a tokenizer's family; :func:`parse_text` reads a completion.
"""

from __future__ import annotations

import logging
from typing import Any

from ors_gym.families._detect import Detected, detect
from ors_gym.families._examples import call_example, tools_prompt
from ors_gym.families._formats import FORMATS, WireFormat
from ors_gym.families._parse import from_parsed_response, parse_text
from ors_gym.families._table import FAMILIES, Family, format_name

logger = logging.getLogger("ors_gym")

__all__ = [
    "DEFAULT",
    "FAMILIES",
    "FORMATS",
    "Detected",
    "Family",
    "WireFormat",
    "call_example",
    "check_tool_format",
    "detect",
    "family",
    "format_name",
    "from_parsed_response",
    "parse_text",
    "tokenizer_family",
    "tools_prompt",
    "warn_once",
]


#: The family (and format) assumed when none can be told: Hermes-style JSON calls,
#: ``<think>`` reasoning.
DEFAULT = "hermes"


def family(name: str) -> Family:
    """The model family called ``name`` (a :data:`FAMILIES` key, or any renderers name:
    one only its renderer reads)."""
    found = FAMILIES.get(name)
    if found is not None:
        return found
    try:
        from renderers import config_from_name

        known = config_from_name(name) is not None
    except (ImportError, ValueError, KeyError):
        known = False
    if known:  # a family only renderers reads: no text reader of ours
        return Family(name, name, None)
    raise ValueError(
        f"unknown model family {name!r}: use one of {', '.join(sorted(FAMILIES))} "
        "(or a renderers renderer name)"
    )


def check_tool_format(name: Any) -> str:
    """``name`` checked to be a family or format whose raw text can be read (its wire
    format's name)."""
    if not isinstance(name, str):
        raise TypeError(f"tool_format must be a model family name (str), got {name!r}")
    if name in FORMATS:
        return name
    fam = family(name)
    if fam.format is None:
        readable = sorted(k for k, v in FAMILIES.items() if v.format is not None)
        raise ValueError(
            f"tool_format={name!r}: that family's text is read only by its renderers "
            f"renderer (at the token level: ors_gym.tokens.TokenEnv); the text path reads "
            f"{', '.join(readable)}"
        )
    return fam.format


def tokenizer_family(tokenizer: Any) -> str:
    """The family of ``tokenizer``'s model (:func:`detect`), or the default one, said once
    at WARNING, when none can be told."""
    found = detect(tokenizer)
    if found.family is not None:
        return found.family
    name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    warn_once(
        f"cannot tell the model family of tokenizer {name!r} ({found.how}): reading its "
        "completions as Hermes-style <tool_call> JSON calls; pass tool_format=<family> "
        "(renderer=<family> for token ids) if it writes another"
    )
    return DEFAULT


_said: set[str] = set()


def warn_once(message: str) -> None:
    """Log ``message`` at WARNING the first time this process says it."""
    if message not in _said:
        _said.add(message)
        logger.warning(message)
