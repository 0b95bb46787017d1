"""Model families: how each writes its tool calls and reasoning, and how to tell them apart.

A model family (Qwen3, Qwen3.5, GLM, gpt-oss, Kimi, MiniMax, Gemma, DeepSeek,
Llama...) writes its tool calls and its reasoning in a format of its own; reading
one family's output by another's rules trains the model against itself. A
:class:`Family` names the ``renderers`` renderer that renders and parses the
family's tokens (where one serves it offline) and the text parser that reads its
raw completion text (the text path, and the token path where no renderer serves).
:func:`detect` finds a tokenizer's family; :func:`parse_text` reads a completion.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ors_gym.families._detect import Detected, detect
from ors_gym.families._parse import (
    AssistantParse,
    call_example,
    from_parsed_response,
    parse_text,
)

logger = logging.getLogger("ors_gym")

__all__ = [
    "DEFAULT",
    "FAMILIES",
    "AssistantParse",
    "Detected",
    "Family",
    "call_example",
    "check_tool_format",
    "detect",
    "family",
    "from_parsed_response",
    "parse_text",
    "tokenizer_family",
    "warn_once",
]


@dataclass(frozen=True)
class Family:
    """One model family's formats.

    ``renderer``: the ``renderers`` name that renders and parses its tokens, or None
    where none serves it (its chat template renders and ``text`` parses). ``text``: the
    text parser's name (:func:`parse_text`), or None where only the renderer parses.
    ``reasoning``: where its reasoning goes, as the docs say it. ``reasoning_field`` and
    ``string_arguments``: how its chat template reads an assistant turn (the field that
    holds the reasoning; call arguments as a JSON string rather than an object).
    ``read_text``: its completions are read by the text parser even where its renderer
    serves (Llama 3: the renderer takes a broken JSON call for a plain reply).
    """

    name: str
    renderer: str | None
    text: str | None
    reasoning: str
    reasoning_field: str = "reasoning_content"
    string_arguments: bool = False
    read_text: bool = False


def _families(*rows: tuple[Any, ...]) -> dict[str, Family]:
    return {row[0]: Family(*row) for row in rows}


#: Every family by name: the ``renderers`` names, plus the formats renderers cannot serve.
FAMILIES: dict[str, Family] = _families(
    ("hermes", None, "hermes", "<think> block"),
    ("qwen2.5", None, "hermes", "none (no reasoning mode)"),
    ("qwen3", "qwen3", "hermes", "<think> block"),
    ("qwen3-coder", None, "qwen3.5", "none (no reasoning mode)"),
    ("qwen3-vl", "qwen3-vl", "hermes", "<think> block"),
    ("prime-qwen3", "prime-qwen3", "qwen3.5", "<think> block"),
    ("qwen3.5", "qwen3.5", "qwen3.5", "<think> block"),
    ("qwen3.6", "qwen3.6", "qwen3.5", "<think> block"),
    ("qwen3.8", "qwen3.8", "qwen3.5", "<think> block"),
    ("glm-4.5", "glm-4.5", "glm-4.5", "<think> block"),
    ("glm-4.7", "glm-5", "glm-5", "<think> block"),
    ("glm-5", "glm-5", "glm-5", "<think> block"),
    ("glm-5.1", "glm-5.1", "glm-5", "<think> block"),
    ("glm-5.3", "glm-5.3", "glm-5", "<think> block"),
    ("gpt-oss", "gpt-oss", "gpt-oss", "the analysis channel", "thinking"),
    ("kimi-k2", "kimi-k2", "kimi-k2", "<think> block"),
    ("kimi-k2.5", "kimi-k2.5", "kimi-k2", "<think> block"),
    ("minimax-m2", "minimax-m2", "minimax-m2", "<think> block"),
    ("gemma4", "gemma4", "gemma4", "the thought channel"),
    ("deepseek-v3", "deepseek-v3", "deepseek-v3", "none (no reasoning mode)",
     "reasoning_content", True),
    ("deepseek-r1", "deepseek-r1", "deepseek-v3", "<think> block", "reasoning_content", True),
    ("deepseek-v3.1", None, "deepseek-v3.1", "<think> block (closed by </think>)",
     "reasoning_content", True),
    *(
        (name, "llama-3", "llama-3", "none (no reasoning mode)", "reasoning_content", False, True)
        for name in ("llama-3", "llama-3.1", "llama-3.2")
    ),
)

#: The family assumed when none can be told: Hermes-style JSON calls, ``<think>`` reasoning.
DEFAULT = "hermes"


def family(name: str) -> Family:
    """The family called ``name`` (a :data:`FAMILIES` key, or any renderers name)."""
    found = FAMILIES.get(name)
    if found is not None:
        return found
    try:
        from renderers import config_from_name

        known = config_from_name(name) is not None
    except (ImportError, ValueError, KeyError):
        known = False
    if known:  # a family only renderers reads: no text parser of ours
        return Family(name, name, None, "as its renderer parses it")
    raise ValueError(
        f"unknown model family {name!r}: use one of {', '.join(sorted(FAMILIES))} "
        "(or a renderers renderer name)"
    )


def check_tool_format(name: Any) -> str:
    """``name`` checked to be a family whose raw text can be read (its text parser's name)."""
    if not isinstance(name, str):
        raise TypeError(f"tool_format must be a model family name (str), got {name!r}")
    fam = family(name)
    if fam.text is None:
        readable = sorted(k for k, v in FAMILIES.items() if v.text is not None)
        raise ValueError(
            f"tool_format={name!r}: that family's text is read only by its renderers "
            f"renderer (at the token level: ors_gym.tokens.TokenEnv); the text path reads "
            f"{', '.join(readable)}"
        )
    return fam.text


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
