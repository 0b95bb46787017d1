"""The model families: one row each (its renderer, its text parser, how its template reads a
turn). The text parsers' other names (``_markers.ALIASES``) come from here too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FAMILIES", "Family"]


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
