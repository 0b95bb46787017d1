"""Which model family wrote a tokenizer's chat template.

The hub name is a hint (``renderers``' map of model names to renderers); the
tokenizer is the truth: a local or fine-tuned checkpoint keeps its family's chat
template and special tokens, so those are read when the name says nothing: each
family row's fingerprint (``_table``) is markers its template writes for a tool call
or a turn, tried most specific first (Qwen3.5 and GLM also write ``<tool_call>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ors_gym.families._table import FAMILIES

__all__ = ["Detected", "detect"]


@dataclass(frozen=True)
class Detected:
    """A tokenizer's family (None when none can be told) and how it was told."""

    family: str | None
    how: str


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
    for fam in FAMILIES.values():
        if (fam.fingerprint and all(m in template for m in fam.fingerprint)
                and not any(m in template for m in fam.unless)):
            return Detected(fam.name, "its chat template and special tokens")
    return Detected(None, "neither its name nor its chat template names a known family")


def _hub_family(name: str) -> str | None:
    """The renderers name for an exact hub model name, when the library is installed."""
    from ors_gym._compat.renderers import hub_renderer_name

    return hub_renderer_name(name)
