"""Tiny vision-language processors: transformers' own processor classes built around the
tests' tiny tokenizers (no download: the image processor with its defaults made small, and
no video processor, which needs torchvision)."""

from __future__ import annotations

from typing import Any


def processor_class(base: type, optional: tuple[str, ...]) -> type:
    """``base`` (a transformers processor class) taking None for the parts it does not need
    here (the video processor needs torchvision; Gemma 4's audio extractor is unused)."""

    class Tiny(base):  # type: ignore[misc, valid-type]
        def check_argument_for_proper_class(self, name: str, argument: Any) -> Any:
            if argument is None and name in optional:
                return None
            return super().check_argument_for_proper_class(name, argument)

    Tiny.__name__ = base.__name__
    return Tiny


def qwen_processor(tok: Any, base: str = "Qwen3VLProcessor", template: str | None = None) -> Any:
    """A Qwen vision processor (``base``) around ``tok``, its images at most 112x112 px."""
    import transformers

    cls = processor_class(getattr(transformers, base), ("video_processor",))
    images = transformers.Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=112 * 112)
    return cls(image_processor=images, tokenizer=tok, video_processor=None,
               chat_template=template or tok.chat_template)
