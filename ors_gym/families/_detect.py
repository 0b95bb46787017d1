"""Which model family wrote a tokenizer's chat template.

The hub name is a hint (``renderers``' map of model names to renderers); the
tokenizer is the truth: a local or fine-tuned checkpoint keeps its family's chat
template and special tokens, so those are read when the name says nothing. Each
fingerprint is a marker the family's template writes for a tool call or a turn,
checked most specific first (Qwen3.5 and GLM also write ``<tool_call>``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Detected", "detect"]


@dataclass(frozen=True)
class Detected:
    """A tokenizer's family (None when none can be told) and how it was told."""

    family: str | None
    how: str


def _has(*markers: str) -> Callable[[str, frozenset[str]], bool]:
    """True when the chat template writes every marker."""
    return lambda template, tokens: all(m in template for m in markers)


#: DeepSeek's tool separator token (full-width bars, a lower one-eighth block for spaces).
_DEEPSEEK_SEP = "<\uff5ctool\u2581sep\uff5c>"


def _deepseek(template: str, tokens: frozenset[str]) -> str | None:
    """V3 and R1 write ``function``, the tool separator, the name and a fenced JSON body;
    V3.1 writes the name, the separator and bare JSON."""
    if _DEEPSEEK_SEP not in template:
        return None
    if "```json" not in template:
        return "deepseek-v3.1"
    return "deepseek-r1" if "<think>" in template else "deepseek-v3"


def _glm(template: str, tokens: frozenset[str]) -> str | None:
    """GLM-4.5 and GLM-4.7/5 share the ``<arg_key>`` calls; GLM-5's template closes
    reasoning it did not open (``</think>`` at the generation prompt when disabled)."""
    if "<arg_key>" not in template:
        return None
    return "glm-5" if "clear_thinking" in template else "glm-4.5"


#: (family, test) most specific first: each test reads the template text and added tokens.
_FINGERPRINTS: tuple[tuple[str, Callable[[str, frozenset[str]], bool]], ...] = (
    ("gpt-oss", _has("<|channel|>", "<|message|>", "<|call|>")),
    ("kimi-k2", _has("<|tool_calls_section_begin|>")),
    ("minimax-m2", _has("<minimax:tool_call>")),
    ("gemma4", _has("<|tool_call>")),
    ("qwen3.6", _has("<tool_call>", "<function=", "<parameter=", "preserve_thinking")),
    ("qwen3.5", _has("<tool_call>", "<function=", "<parameter=")),
    ("llama-3", _has("<|start_header_id|>", "<|eot_id|>")),
    ("qwen3", _has("<tool_call>", "<|im_start|>")),
)


def detect(tokenizer: Any) -> Detected:
    """The family of ``tokenizer``: by hub name, else by its chat template and tokens."""
    name = getattr(tokenizer, "name_or_path", None)
    by_name = _hub_family(name) if isinstance(name, str) else None
    if by_name is not None:
        return Detected(by_name, f"the hub name {name!r}")
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates: the default one
        template = template.get("default") or next(iter(template.values()), None)
    if not isinstance(template, str) or not template:
        return Detected(None, "the tokenizer has no chat template")
    tokens = frozenset(str(t) for t in (getattr(tokenizer, "get_added_vocab", dict)() or {}))
    for found in (_deepseek(template, tokens), _glm(template, tokens)):
        if found is not None:
            return Detected(found, "its chat template and special tokens")
    for family, test in _FINGERPRINTS:
        if test(template, tokens):
            return Detected(family, "its chat template and special tokens")
    return Detected(None, "neither its name nor its chat template names a known family")


def _hub_family(name: str) -> str | None:
    """The renderers name for an exact hub model name, when the library is installed."""
    from ors_gym._compat.renderers import hub_renderer_name

    return hub_renderer_name(name)
