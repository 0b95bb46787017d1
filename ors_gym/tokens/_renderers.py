"""The ``renderers`` library as a bridge (the ``tokens`` extra).

``renderers`` (PrimeIntellect) renders a model family's conversations in Python,
token for token as its chat template does, and its ``bridge_to_next_turn``
extends the previous ids with a new turn's without touching them, returning
None where it cannot prove that. It picks a renderer from a hub model name, so
a local or fine-tuned tokenizer needs the renderer named (``"qwen3"``) or
configured (``renderers.Qwen3RendererConfig(...)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.errors import OrsDependencyError

__all__ = ["RenderersBridge", "auto_renderer"]


def _lib() -> Any:
    try:
        import renderers
    except ImportError as exc:
        raise OrsDependencyError(
            "a renderers name or config needs the renderers library: pip install 'ors-gym[tokens]'"
        ) from exc
    return renderers


class RenderersBridge:
    """``renderer``: a renderers name (``"qwen3"``), config, or ``Renderer`` instance."""

    def __init__(self, tokenizer: Any, renderer: Any) -> None:
        lib = _lib()
        if isinstance(renderer, str):
            config = lib.config_from_name(renderer)
            renderer = lib.create_renderer(tokenizer, config)
        elif isinstance(renderer, lib.BaseRendererConfig):
            renderer = lib.create_renderer(tokenizer, renderer)
        elif not isinstance(renderer, lib.Renderer):
            raise TypeError(
                f"renderer must be None, 'template', a renderers name or config, a renderers "
                f"Renderer or an ors_gym.tokens Bridge; got {type(renderer).__name__}"
            )
        self.renderer = renderer
        config = getattr(renderer, "config", None)
        self.name = f"renderers:{getattr(config, 'name', type(renderer).__name__)}"
        self.multimodal = bool(lib.is_multimodal(renderer))
        self.stops = frozenset(renderer.get_stop_token_ids())
        self.multi_modal_data: Any = None

    def prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]]
    ) -> list[int]:
        rendered = self.renderer.render(
            [dict(m) for m in messages], tools=tools or None, add_generation_prompt=True
        )
        self.multi_modal_data = getattr(rendered, "multi_modal_data", None)
        return list(rendered.token_ids)

    def extend(
        self,
        previous: list[int],
        completion: list[int],
        new_messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]],
    ) -> list[int] | None:
        kwargs: dict[str, Any] = {"tools": tools or None}
        if self.multimodal:
            kwargs["previous_multi_modal_data"] = self.multi_modal_data
        bridged = self.renderer.bridge_to_next_turn(
            previous, completion, [dict(m) for m in new_messages], **kwargs
        )
        if bridged is None:
            return None
        ids = bridged.token_ids
        start = len(previous) + len(completion)
        if ids[: len(previous)] != previous or ids[len(previous) : start] != completion:
            return None  # the library's contract, checked: the old ids are kept verbatim
        self.multi_modal_data = getattr(bridged, "multi_modal_data", None)
        return list(ids[start:])

    def close(self, completion: list[int]) -> list[int]:
        if completion and completion[-1] in self.stops:
            return []
        closing = [s for s in self.renderer.get_stop_token_ids()][:1]
        return closing


def auto_renderer(tokenizer: Any) -> Any | None:
    """A renderers name for ``tokenizer`` when the library is installed and knows the
    tokenizer's hub name exactly; None otherwise (use the template)."""
    try:
        from renderers.base import MODEL_RENDERER_MAP
    except ImportError:
        return None
    name = getattr(tokenizer, "name_or_path", None)
    return MODEL_RENDERER_MAP.get(name) if isinstance(name, str) else None
