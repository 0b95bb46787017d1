"""Which family renders a processor's images, and a vision family's chat template as one.

:func:`vision_family` names the family a processor's images are rendered for
(``tokens._choose`` builds its multimodal ``renderers`` renderer with the
processor, or :class:`TemplateImagesBridge` for Qwen2.5-VL, which no renderer
serves; a family that renders no image is refused by name).
Qwen2.5-VL's chat template (the processor's, else the tokenizer's) writes one
``<|vision_start|><|image_pad|><|vision_end|>`` per image part, in order; the
image processor gives the image's grid, and the single ``<|image_pad|>``
becomes ``grid.prod() // merge_size**2`` of them, as ``Qwen2_5_VLProcessor``
expands it. Everything else is the template bridge's (the append-only proof,
parsing by the Hermes rules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ors_gym.actions import AssistantTurn
from ors_gym.families import DEFAULT, Family, detect
from ors_gym.tokens._vision import image_parts, refusal, to_pil
from ors_gym.tokens.bridge import TemplateBridge

__all__ = ["ImageData", "Placeholder", "TemplateImagesBridge", "vision_family"]


#: Processor classes (by name) of families no ``renderers`` renderer serves: their chat
#: template renders, and the placeholders are expanded here.
_TEMPLATE_FAMILIES = {"Qwen2_5_VLProcessor": "qwen2.5-vl", "Qwen2VLProcessor": "qwen2.5-vl"}


def vision_family(tokenizer: Any, processor: Any, renderer: Any) -> str:
    """The family a processor's images are rendered for: ``renderer=`` where named, else
    the tokenizer's (a Qwen3-style template that writes vision tokens is Qwen3-VL's)."""
    if isinstance(renderer, str) and renderer != "template":
        return renderer
    if renderer is not None and renderer != "template":
        return str(getattr(renderer, "name", "") or getattr(
            getattr(renderer, "config", None), "name", ""))
    kind = _TEMPLATE_FAMILIES.get(type(processor).__name__)
    if kind is not None:
        return kind
    found = detect(tokenizer)
    template = str(getattr(tokenizer, "chat_template", "") or "")
    if found.family in (None, "qwen3", "hermes") and "<|vision_start|>" in template:
        return "qwen3-vl"
    if found.family is None:
        raise refusal(processor, "unknown",
                       f"cannot be told ({found.how}); pass renderer=<family> "
                       "(e.g. 'qwen3.5', 'qwen3-vl', 'gemma4')")
    return found.family


@dataclass(frozen=True)
class Placeholder:
    """One image's placeholder run: its first id's offset in the row, its length."""

    offset: int
    length: int


@dataclass
class ImageData:
    """A row's image data, named as renderers' ``MultiModalData`` names it: per modality,
    each image's placeholder run and its processor output (``pixel_values``,
    ``image_grid_thw``)."""

    mm_placeholders: dict[str, list[Placeholder]] = field(default_factory=dict)
    mm_items: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def plus(self, placeholders: list[Placeholder], items: list[dict[str, Any]]) -> ImageData:
        return ImageData(
            {"image": [*self.mm_placeholders.get("image", []), *placeholders]},
            {"image": [*self.mm_items.get("image", []), *items]},
        )


class TemplateImagesBridge:
    """The chat template with ``processor``'s image expansion (Qwen2.5-VL)."""

    multimodal = True

    def __init__(self, tokenizer: Any, processor: Any, kwargs: Mapping[str, Any]) -> None:
        template = getattr(processor, "chat_template", None) or tokenizer.chat_template
        self._text = TemplateBridge(tokenizer, {**kwargs, "chat_template": template},
                                    family=DEFAULT)
        self.tokenizer = tokenizer
        self.processor = processor
        self.name = "template+processor"
        self.family: Family = self._text.family
        self.stops = self._text.stops
        self.pad = int(tokenizer.convert_tokens_to_ids("<|image_pad|>"))
        if self.pad == getattr(tokenizer, "unk_token_id", None):
            raise ValueError(
                f"processor={type(processor).__name__} was given, but the tokenizer has no "
                "<|image_pad|> token: pass the model's own tokenizer"
            )
        self.multi_modal_data: ImageData | None = None

    def prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]]
    ) -> list[int]:
        ids = self._text.prompt(messages, tools)
        ids, placeholders, items = self._expand(ids, image_parts(messages), 0)
        self.multi_modal_data = ImageData().plus(placeholders, items) if items else None
        return ids

    def extend(
        self,
        previous: list[int],
        completion: list[int],
        new_messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]],
        turn: Mapping[str, Any] | None = None,
    ) -> list[int] | None:
        added = self._text.extend(previous, completion, new_messages, tools, turn=turn)
        if added is None:
            return None
        start = len(previous) + len(completion)
        added, placeholders, items = self._expand(added, image_parts(new_messages), start)
        if items:
            self.multi_modal_data = (self.multi_modal_data or ImageData()).plus(
                placeholders, items)
        return added

    def close(self, completion: list[int]) -> list[int]:
        return self._text.close(completion)

    def parse(
        self, prompt: list[int], completion: list[int], tools: list[dict[str, Any]]
    ) -> AssistantTurn:
        return self._text.parse(prompt, completion, tools)

    def _expand(
        self, ids: list[int], parts: list[dict[str, Any]], start: int
    ) -> tuple[list[int], list[Placeholder], list[dict[str, Any]]]:
        """Each ``<|image_pad|>`` of ``ids`` (one per image part, in order) as its run."""
        if ids.count(self.pad) != len(parts):
            raise ValueError(
                f"the chat template wrote {ids.count(self.pad)} <|image_pad|> for "
                f"{len(parts)} image(s): it does not render images where the messages put them"
            )
        out: list[int] = []
        placeholders, items = [], []
        images = iter(parts)
        for tid in ids:
            if tid != self.pad:
                out.append(tid)
                continue
            item, n = self._process(next(images))
            placeholders.append(Placeholder(start + len(out), n))
            items.append(item)
            out += [self.pad] * n
        return out, placeholders, items

    def _process(self, part: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        images = self.processor.image_processor
        out = images(images=[to_pil(part)], return_tensors="np")
        grid = out["image_grid_thw"][0]
        merge = int(getattr(images, "merge_size", 2))
        count = 1
        for g in grid:
            count *= int(g)
        return ({"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]},
                count // (merge * merge))
