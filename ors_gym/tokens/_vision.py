"""Vision-language models at the token level: the processor, the family that renders images,
and each row's images.

A processor (``Qwen3VLProcessor``, ``Gemma4Processor``, ...) may be given as
``processor=`` beside the tokenizer, or in the tokenizer's place (its
``.tokenizer`` is used). It reaches the family's multimodal ``renderers``
renderer (Qwen3-VL, Qwen3.5/3.6/3.8, Gemma 4), which expands each image into
the placeholder run the processor gives and hands back the pixel data with the
placeholders' offsets; Qwen2.5-VL, which no renderer serves, is rendered by its
chat template and expanded here (:mod:`ors_gym.tokens._images`). A family that
renders no image refuses a processor; a multimodal family without one reads
the text note, said at WARNING (no processor is ever fetched from a hub).

Each :class:`~ors_gym.tokens.TokenRow` keeps exactly the images whose
placeholders are in its ids, in order, with the renderer's data for them; they
are recorded only once the ids that carry them are accepted (a step over the
token budget, or an environment reply the model never reads, adds none).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ors_gym.families import warn_once

__all__ = [
    "Pending",
    "extend_row",
    "image_parts",
    "refusal",
    "renderer_with_processor",
    "renders_images",
    "row_images",
    "split_processor",
]

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


# -- the renderers side -----------------------------------------------------------------------


def renderer_with_processor(renderer: Any, tokenizer: Any, processor: Any) -> Any:
    """``renderer`` rebuilt with ``processor`` (renderers' factory takes none: its
    multimodal renderers take it as ``processor=``)."""
    try:
        return type(renderer)(tokenizer, renderer.config, processor=processor)
    except TypeError as exc:
        raise refusal(processor, str(getattr(renderer.config, "name", renderer)),
                       "renders text only: its renderer takes no processor") from exc


def renders_images(lib: Any, renderer: Any, name: str) -> bool:
    """Whether the renderer renders images here: it is multimodal and has a processor. A
    multimodal renderer without one renders the text note, said at WARNING (it would
    otherwise fetch a processor from the hub at the first image)."""
    from ors_gym._compat.renderers import renderer_processor

    if not lib.is_multimodal(renderer):
        return False
    if renderer_processor(renderer) is not None:
        return True
    warn_once(
        f"the {name!r} renderer renders images, but no processor was given: images reach "
        "the model as a text note; pass processor=<the model's processor> (e.g. "
        "AutoProcessor.from_pretrained(...)) to TokenEnv, AsyncTokenEnv or the batch to "
        "show them"
    )
    return False


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
