"""renderers: the hub-name map and the harmony parser, names the package does not export.

``renderers.base.MODEL_RENDERER_MAP`` (hub model name -> renderer name) is what
its own auto-resolution reads; ``renderers.parsing.parse_gpt_oss`` parses
harmony from ids without the gpt-oss renderer, which loads harmony's
vocabulary from the network. Neither is in ``renderers.__all__``. Outside the
verified range the hub map is not read (a family is then found from the
tokenizer's chat template), and gpt-oss text needs the names to be there.
A multimodal renderer keeps the processor it was built with as ``_processor``
(None until given: it then loads one from the hub at the first image).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ors_gym._compat._versions import note_fallback, version_of, within
from ors_gym.errors import OrsDependencyError

__all__ = [
    "VERIFIED",
    "harmony_parser",
    "hub_renderer_name",
    "mapped_renderer_names",
    "renderer_processor",
]

#: renderers releases whose base.MODEL_RENDERER_MAP and parsing.parse_gpt_oss are used here.
VERIFIED = ((0, 1, 10), (0, 2))


def hub_renderer_name(name: str) -> str | None:
    """renderers' renderer name for an exact hub model name; None when it maps none, when
    renderers is not installed, or outside the verified range."""
    if version_of("renderers") is None:
        return None
    if not within("renderers", *VERIFIED):
        note_fallback(
            "renderers.base.MODEL_RENDERER_MAP",
            f"renderers {version_of('renderers')} is outside the verified range {VERIFIED}; "
            "families are found from the tokenizer's chat template only",
        )
        return None
    from renderers.base import MODEL_RENDERER_MAP

    found = MODEL_RENDERER_MAP.get(name)
    return None if found is None else str(found)


def mapped_renderer_names() -> frozenset[str]:
    """Every renderer name renderers' hub map resolves a model to (empty when renderers is
    not installed, or outside the verified range): each must be a row of the family
    table, or hub-named models of it would be read by no rule of ours."""
    if version_of("renderers") is None or not within("renderers", *VERIFIED):
        return frozenset()
    from renderers.base import MODEL_RENDERER_MAP

    return frozenset(str(name) for name in MODEL_RENDERER_MAP.values())


def harmony_parser() -> Callable[..., Any]:
    """``renderers.parsing.parse_gpt_oss``, checked to be there."""
    try:
        from renderers.parsing import parse_gpt_oss
    except ImportError as exc:
        raise OrsDependencyError(
            f"reading gpt-oss (harmony) text needs renderers {VERIFIED[0]} to {VERIFIED[1]} "
            f"(installed: {version_of('renderers')}): pip install 'ors-gym[tokens]'"
        ) from exc
    return parse_gpt_oss


def renderer_processor(renderer: Any) -> Any:
    """The processor a multimodal renderer was built with, or None. Outside the verified
    range, None (the renderer is then taken to have none: images become the text note)."""
    if not within("renderers", *VERIFIED):
        note_fallback(
            "renderers' Renderer._processor",
            f"renderers {version_of('renderers')} is outside the verified range {VERIFIED}; "
            "a renderer built by hand is taken to have no processor",
        )
        return None
    return getattr(renderer, "_processor", None)
