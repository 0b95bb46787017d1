"""Vision-language models at the token level, in one module: the processor, the bridge
that renders its images, and each row's images.

A processor (``Qwen3VLProcessor``, ``Gemma4Processor``, ...) may be given as
``processor=`` beside the tokenizer, or in the tokenizer's place (its
``.tokenizer`` is used: :func:`split_processor`). :func:`vision_bridge` is the one
place a processor becomes a bridge: it names the family the images are rendered for
(:func:`vision_family`) and builds that family's multimodal ``renderers`` renderer
with the processor (Qwen3-VL, Qwen3.5/3.6/3.8, Gemma 4), which expands each image
into the placeholder run the processor gives and hands back the pixel data with the
placeholders' offsets; Qwen2.5-VL, which no renderer serves, is rendered by its chat
template and expanded here (:class:`TemplateImagesBridge`). A family that renders no
image refuses a processor; a multimodal family without one reads the text note, said
at WARNING (no processor is ever fetched from a hub).

Each :class:`~ors_gym.tokens.TokenRow` keeps exactly the images whose
placeholders are in its ids, in order, with the renderer's data for them; they
are recorded only once the ids that carry them are accepted (a step over the
token budget, or an environment reply the model never reads, adds none).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ors_gym.actions import AssistantTurn
from ors_gym.families import DEFAULT, Family, detect, family
from ors_gym.tokens._renderers import RenderersBridge
from ors_gym.tokens.bridge import Bridge, Messages, TemplateBridge, Tools

__all__ = [
    "ImageData",
    "Pending",
    "Placeholder",
    "TemplateImagesBridge",
    "accept",
    "extend_row",
    "image_part",
    "image_parts",
    "is_processor",
    "refusal",
    "row_images",
    "split_processor",
    "vision_bridge",
    "vision_family",
]


# -- the processor -------------------------------------------------------------------------


def is_processor(obj: Any) -> bool:
    """Whether ``obj`` is a multimodal processor (a tokenizer and an image processor)."""
    return getattr(obj, "image_processor", None) is not None and hasattr(obj, "tokenizer")


def split_processor(tokenizer: Any, processor: Any = None) -> tuple[Any, Any]:
    """(the text tokenizer, the processor or None): a processor passed in the tokenizer's
    place gives its ``.tokenizer``."""
    if is_processor(tokenizer):
        if processor is not None and processor is not tokenizer:
            raise ValueError(
                f"a processor ({type(tokenizer).__name__}) was passed as the tokenizer and "
                f"another as processor= ({type(processor).__name__}): pass one of them"
            )
        return tokenizer.tokenizer, tokenizer
    if processor is not None and not is_processor(processor):
        raise TypeError(
            f"processor= takes a multimodal processor with an image_processor and a "
            f"tokenizer (e.g. transformers' Qwen3VLProcessor); got {type(processor).__name__}"
        )
    return tokenizer, processor


def refusal(processor: Any, name: str, why: str) -> ValueError:
    """The error for a processor given to a family that cannot render its images."""
    return ValueError(
        f"processor={type(processor).__name__} was given, but the {name!r} model family "
        f"{why}. Images are rendered for Qwen2.5-VL, Qwen3-VL, Qwen3.5/3.6/3.8 and Gemma 4; "
        "drop processor= to show a text model a note in place of each image"
    )



# -- which bridge renders a processor's images ----------------------------------------


def vision_bridge(tokenizer: Any, processor: Any, renderer: Any,
                  kwargs: dict[str, Any]) -> Bridge:
    """The bridge that renders ``processor``'s images for ``tokenizer``'s family, or a
    ValueError naming the processor where that family renders no image."""
    name = vision_family(tokenizer, processor, renderer)
    if name == "qwen2.5-vl":
        return TemplateImagesBridge(tokenizer, processor, kwargs)
    if renderer is None or isinstance(renderer, str):
        renderer = family(name).renderer
        if renderer is None:
            raise refusal(processor, name, "renders no images here (no renderer serves it)")
    bridge = RenderersBridge(tokenizer, renderer, kwargs, processor=processor)
    if not bridge.multimodal:
        raise refusal(processor, bridge.name.removeprefix("renderers:"),
                      "renders text only: its renderer takes no image")
    return bridge


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



# -- Qwen2.5-VL: its chat template, the processor's expansion ---------------------------


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

    def prompt(self, messages: Messages, tools: Tools) -> list[int]:
        ids = self._text.prompt(messages, tools)
        ids, placeholders, items = self._expand(ids, image_parts(messages), 0)
        self.multi_modal_data = ImageData().plus(placeholders, items) if items else None
        return ids

    def extend(self, previous: list[int], completion: list[int], new_messages: Messages,
               tools: Tools, turn: Mapping[str, Any] | None = None) -> list[int] | None:
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


# -- chat content ---------------------------------------------------------------------------


def image_part(data: str, mime: str) -> dict[str, Any]:
    """A chat content part holding an image as a data URL, the shape both the renderers
    and the families' chat templates read."""
    url = data if data.startswith("data:") else f"data:{mime};base64,{data}"
    return {"type": "image", "image": url}


def image_parts(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The image parts of ``messages``, in the order a chat template renders them."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            out += [dict(p) for p in content if isinstance(p, Mapping) and p.get("type") == "image"]
    return out


def to_pil(part: Mapping[str, Any]) -> Any:
    """An image part as an RGB ``PIL.Image`` (what processors and trainers take)."""
    from PIL import Image

    raw = part["image"]
    if isinstance(raw, Image.Image):
        return raw.convert("RGB")
    _, _, data = str(raw).partition(",")
    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


# -- each row's images --------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """Images a rendering added, kept until its ids are accepted: the images in order, and
    the bridge's data for the row after them."""

    images: list[Any]
    data: Any


def _placeholders(data: Any) -> int:
    if data is None:
        return 0
    return len(getattr(data, "mm_placeholders", {}).get("image", ()))


def _pending(bridge: Any, before: Any, parts: list[dict[str, Any]]) -> Pending | None:
    if not getattr(bridge, "multimodal", False):
        return None
    if not hasattr(bridge, "multi_modal_data"):  # a Bridge of one's own: the parts, unchecked
        return Pending([to_pil(p) for p in parts], None)
    data = bridge.multi_modal_data
    added = _placeholders(data) - _placeholders(before)
    if added != len(parts):
        raise RuntimeError(
            f"the {bridge.name} bridge rendered {added} image placeholder run(s) for "
            f"{len(parts)} image(s): the images cannot be matched to the ids"
        )
    return Pending([to_pil(p) for p in parts], data)


def row_images(bridge: Any, messages: Sequence[Mapping[str, Any]]) -> Pending | None:
    """The images of a row just started from ``messages`` (read after ``bridge.prompt``),
    for :func:`accept` once the row is taken."""
    return _pending(bridge, None, image_parts(messages))


def extend_row(
    bridge: Any,
    row: Any,
    previous: list[int],
    completion: list[int],
    new: Sequence[Mapping[str, Any]],
    tools: list[dict[str, Any]],
    turn: Mapping[str, Any],
) -> tuple[list[int] | None, Pending | None]:
    """``bridge.extend`` from the row's own image data (a bridge shared by episodes keeps
    none of theirs), and the images it added, for :func:`accept` once the ids are taken."""
    if getattr(bridge, "multimodal", False):
        bridge.multi_modal_data = row.multi_modal_data
    added = bridge.extend(previous, completion, new, tools, turn=turn)
    if added is None:
        return None, None
    return added, _pending(bridge, row.multi_modal_data, image_parts(new))


def accept(row: Any, pending: Pending | None) -> None:
    """Record ``pending``'s images on ``row``: its ids are in the row now (nothing here
    raises: the images were decoded and matched before)."""
    if pending is None:
        return
    row.images.extend(pending.images)
    row.multi_modal_data = pending.data
