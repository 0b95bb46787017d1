"""ORS content blocks -> Gymnasium observations (text + RGB images as numpy).

An observation is ``{"text": str, "images": tuple[np.ndarray, ...]}``: the text
blocks joined with ``"\\n"`` in order, and every image block decoded by pillow
to an ``(H, W, 3) uint8`` array. Blocks come from untrusted servers, so nothing
in a block makes :func:`decode_blocks` raise: a broken image becomes a note,
``"[image 2 could not be decoded: <reason>]"``, written into the text where the
image was and listed in :attr:`DecodedBlocks.notes`.

Decisions, and why:

* **Formats by content.** The declared ``mimeType`` is not trusted: the bytes
  are decoded as whatever PNG, JPEG, WebP, GIF or BMP they are (servers often
  label a JPEG ``image/png``). The MIME type only appears in the message when
  decoding fails. Other formats pillow knows (TIFF, ICO, PSD, ...) are refused
  on purpose: fewer parsers exposed to server-supplied bytes.
* **Decompression bombs.** The declared size is checked against ``max_pixels``
  before any pixel is decoded. Images are opened through pillow's format
  plugins (not ``Image.open``), so pillow's global ``Image.MAX_IMAGE_PIXELS``
  guard is neither run nor changed and ``max_pixels`` is the one limit. Only
  the GIF plugin runs that guard itself: there its warning is silenced in a
  local ``warnings.catch_warnings`` and its error becomes a note.
* **Alpha.** Transparent images (RGBA, LA, P/L/RGB with a transparency key)
  are composited on white, as a viewer would show them; dropping alpha would
  expose whatever colour hides under transparent pixels (often black).
* **Modes.** 16-bit grayscale is scaled (``>> 8``), not clipped as pillow's
  ``convert`` does; palette, 1-bit, L, CMYK and YCbCr go through ``convert``.
  Animated GIF/WebP give their first frame.
* **Resizing.** With ``image_size=(H, W)`` every image is stretched to exactly
  that shape (aspect ratio not kept) with ``Image.Resampling.BILINEAR``, which
  pillow applies as an antialiasing triangle filter when shrinking;
  ``reducing_gap=3.0`` first box-reduces large shrinks (indistinguishable
  output, much faster), and JPEGs are DCT-downscaled while decoding.
* **Writeable arrays.** ``np.asarray(image)`` is read-only in recent pillow;
  the arrays returned here are fresh, C-contiguous and writeable (no torch
  "non-writable array" warning, SB3 buffers and in-place augmentation work).
  The copy stands in for the one ``convert("RGB")`` makes, which is skipped
  for RGB images, so decoding stays at pillow's own cost
  (``benchmarks/bench_decode.py``).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import urllib.parse
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

# Importing the plugins registers their openers in ``Image.OPEN``.
from PIL import (
    BmpImagePlugin,  # noqa: F401
    GifImagePlugin,  # noqa: F401
    Image,
    JpegImagePlugin,  # noqa: F401
    PngImagePlugin,  # noqa: F401
    WebPImagePlugin,  # noqa: F401
)

from ors_gym.protocol import TextBlock
from ors_gym.spaces import AnyImage, AnyText

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "DecodedBlocks",
    "ImageDecodeError",
    "decode_blocks",
    "decode_image",
    "empty_observation",
    "observation_and_notes",
    "observation_space",
]

logger = logging.getLogger("ors_gym")

DEFAULT_MAX_PIXELS = 4096 * 4096
"""Largest declared width*height decoded; bigger images become a note (bomb guard)."""

_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
_FORMAT_NAMES = "PNG, JPEG, WebP, GIF or BMP"
# Plugins that run pillow's global bomb check inside their opener (GIF grows its
# size to the first frame's extent); our own check on im.size follows.
_CHECKS_INSIDE_OPEN = frozenset({"GIF"})
_Opener = tuple[str, Callable[[IO[bytes], str], Image.Image], Callable[[bytes], Any] | None]
_OPENERS: tuple[_Opener, ...] = tuple(
    (fmt, *Image.OPEN[fmt]) for fmt in _FORMATS if fmt in Image.OPEN
)
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
_WHITE = (255, 255, 255)
_URLSAFE = str.maketrans("-_", "+/")
_MAX_DEPTH = 16


class ImageDecodeError(ValueError):
    """An image block's data could not be turned into pixels; the message says why."""


@dataclass(frozen=True, slots=True)
class DecodedBlocks:
    """The observation built from blocks, and the problems met on the way.

    ``notes`` repeats, in order, the bracketed lines that were also written
    into ``observation["text"]`` (broken images, unknown block types).
    """

    observation: dict[str, Any]
    notes: tuple[str, ...] = ()


class Observation(dict[str, Any]):
    """An observation: a plain dict ``{"text": str, "images": tuple[np.ndarray, ...]}``
    whose repr summarises the images (shape, dtype) instead of printing their pixels."""

    def __repr__(self) -> str:
        parts = []
        for key, value in self.items():
            if key == "images" and isinstance(value, tuple):
                shown = ", ".join(_array_summary(a) for a in value)
                value_repr = f"({shown}{',' if len(value) == 1 else ''})"
            else:
                value_repr = repr(value)
            parts.append(f"{key!r}: {value_repr}")
        return f"Observation({{{', '.join(parts)}}})"

    def __reduce__(self) -> Any:  # pickles (and copies) as a plain dict would
        return (Observation, (dict(self),))


def _array_summary(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is None:
        return repr(value)
    return f"<array shape={tuple(shape)} dtype={value.dtype}>"


def empty_observation() -> dict[str, Any]:
    """The observation with no text and no images (before reset, after close)."""
    return Observation(text="", images=())


def observation_space(
    image_size: tuple[int, int] | None = None, max_text_length: int = 1_000_000
) -> spaces.Dict:
    """The space of :func:`decode_blocks` observations made with the same ``image_size``.

    Without ``image_size`` images keep their own shape (``AnyImage``); with
    ``(H, W)`` every image is a ``Box(0, 255, (H, W, 3), uint8)``.
    """
    size = _check_image_size(image_size)
    image: spaces.Space[Any]
    if size is None:
        image = AnyImage()
    else:
        image = spaces.Box(0, 255, (size[0], size[1], 3), np.uint8)
    return spaces.Dict(
        {"text": AnyText(max_text_length), "images": spaces.Sequence(image, stack=False)}
    )


def decode_blocks(
    blocks: Iterable[Any],
    *,
    image_size: tuple[int, int] | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> DecodedBlocks:
    """Turn ORS blocks into ``{"text": str, "images": tuple}``; never raises for bad blocks.

    Blocks are duck-typed: ``ors_gym.protocol`` models, the openreward SDK's
    block objects and plain dicts all work (``type`` plus ``text`` or
    ``data``/``mimeType``). ``/messages`` blocks are rendered too: a
    ``tool_result``'s inner blocks in place (after a ``[tool_result ...]``
    line), ``reasoning`` and ``tool_call`` as one text line each. Images are
    numbered from 1 in block order, broken ones included, so ``image 2`` in a
    note is the second image block. ``ValueError`` only for a bad
    ``image_size`` or ``max_pixels``.
    """
    observation, notes = observation_and_notes(blocks, image_size, max_pixels)
    return DecodedBlocks(observation, notes)


def observation_and_notes(
    blocks: Iterable[Any], image_size: tuple[int, int] | None, max_pixels: int
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``decode_blocks``' observation and notes as a plain pair (a step's, built on every
    step, skips the ``DecodedBlocks`` around them)."""
    size, pixels = _check_image_size(image_size), _check_max_pixels(max_pixels)
    if type(blocks) is list:  # text blocks only (the usual case): no walk, nothing to note
        texts = []
        for block in blocks:
            if type(block) is not TextBlock or block.type != "text":
                break
            text = block.text
            if type(text) is not str:
                break
            texts.append(text)
        else:
            return Observation(text="\n".join(texts), images=()), ()
    walker = _Walker(size, pixels)
    walker.walk(blocks, 0)
    observation = Observation(text="\n".join(walker.parts), images=tuple(walker.images))
    return observation, tuple(walker.notes)


def decode_image(
    data: str | bytes | bytearray | memoryview,
    mime_type: str | None,
    *,
    image_size: tuple[int, int] | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> NDArray[np.uint8]:
    """Decode one image to a writeable ``(H, W, 3) uint8`` RGB array.

    ``data`` is a base64 ``str`` (an ORS block's ``data``; a ``data:`` URL is
    accepted too) or the raw image ``bytes``. ``mime_type`` is only reported
    in errors: the format is detected from the bytes. Raises
    :class:`ImageDecodeError` saying what is wrong with the data.
    """
    return _decode(
        data, mime_type, _check_image_size(image_size), _check_max_pixels(max_pixels)
    )


# -- blocks -------------------------------------------------------------------------------


class _Walker:
    """Accumulates text parts, images and notes over a (nested) block list."""

    __slots__ = ("image_count", "image_size", "images", "max_pixels", "notes", "parts")

    def __init__(self, image_size: tuple[int, int] | None, max_pixels: int) -> None:
        self.image_size = image_size
        self.max_pixels = max_pixels
        self.parts: list[str] = []
        self.images: list[NDArray[np.uint8]] = []
        self.notes: list[str] = []
        self.image_count = 0

    def note(self, line: str) -> None:
        logger.debug("observation note: %s", line)
        self.parts.append(line)
        self.notes.append(line)

    def walk(self, blocks: Any, depth: int) -> None:
        if type(blocks) is not list and (  # a list (the usual case) needs no ABC checks
            isinstance(blocks, (str, bytes, Mapping)) or not isinstance(blocks, Iterable)
        ):
            self.note(f"[blocks must be a list of blocks, got {type(blocks).__name__}]")
            return
        for block in blocks:
            kind = _get(block, "type")
            if kind == "text":
                text = _get(block, "text")
                if isinstance(text, str):
                    self.parts.append(text)
                else:
                    self.note(f"[text block without a text string: {type(text).__name__}]")
            elif kind == "image":
                self.image(block)
            elif kind == "reasoning":
                self.parts.append(f"[reasoning] {_get(block, 'text', '')}")
            elif kind == "tool_call":
                arguments = json.dumps(_get(block, "input", {}), ensure_ascii=False, default=str)
                name, call_id = _get(block, "name", "?"), _get(block, "id", "?")
                self.parts.append(f"[tool_call {name} id={call_id}] {arguments}")
            elif kind == "tool_result":
                error = " error" if _get(block, "is_error", False) else ""
                self.parts.append(f"[tool_result id={_get(block, 'tool_call_id', '?')}{error}]")
                if depth >= _MAX_DEPTH:
                    self.note(f"[tool_result nested deeper than {_MAX_DEPTH} levels skipped]")
                else:
                    self.walk(_get(block, "blocks", ()), depth + 1)
            else:
                shown = repr(kind) if kind is not None else f"{type(block).__name__} (no type)"
                self.note(f"[unsupported block type {shown} skipped]")

    def image(self, block: Any) -> None:
        self.image_count += 1
        try:
            data = _get(block, "data")
            if data is None:
                raise ImageDecodeError("the image block has no 'data' field")
            array = _decode(data, _get(block, "mimeType"), self.image_size, self.max_pixels)
        except ImageDecodeError as exc:
            self.note(f"[image {self.image_count} could not be decoded: {exc}]")
        else:
            self.images.append(array)


def _get(block: Any, name: str, default: Any = None) -> Any:
    """``block.name`` for model objects, ``block[name]`` for dicts."""
    value = getattr(block, name, _MISSING)
    if value is not _MISSING:
        return value
    if isinstance(block, Mapping):
        return block.get(name, default)
    return default


_MISSING = object()


# -- images -------------------------------------------------------------------------------


def _decode(
    data: Any, mime_type: Any, size: tuple[int, int] | None, max_pixels: int
) -> NDArray[np.uint8]:
    raw, declared = _image_bytes(data, mime_type)
    if not raw:
        raise ImageDecodeError("the image data is empty")
    fmt, im = _open(raw, declared)
    width, height = im.size
    if width <= 0 or height <= 0:
        raise ImageDecodeError(f"the {fmt} image has zero size ({width}x{height})")
    if width * height > max_pixels:
        raise ImageDecodeError(
            f"the {fmt} image declares {width}x{height} = {width * height:,} pixels, over "
            f"max_pixels={max_pixels:,} (a possible decompression bomb); pass a larger "
            "max_pixels if images this big are expected"
        )
    try:
        if size is not None and fmt == "JPEG":
            im.draft(None, (size[1], size[0]))  # DCT-scale while decoding, still >= target
        im.load()
        im = _to_rgb(im)
        if size is not None and im.size != (size[1], size[0]):
            im = im.resize((size[1], size[0]), Image.Resampling.BILINEAR, reducing_gap=3.0)
        array = np.array(im)  # a fresh writeable copy (np.asarray would be read-only)
    except Exception as exc:  # pillow raises OSError, ValueError, SyntaxError, struct.error...
        raise ImageDecodeError(f"corrupt or truncated {fmt} image: {_reason(exc)}") from None
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:  # never expected
        raise ImageDecodeError(f"the {fmt} image decoded to {array.dtype} {array.shape}")
    return array


def _image_bytes(data: Any, mime_type: Any) -> tuple[bytes, str]:
    """The raw image bytes of a block's ``data``, and the declared MIME type."""
    declared = mime_type if isinstance(mime_type, str) else ""
    if isinstance(data, bytes):
        return data, declared
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data), declared
    if not isinstance(data, str):
        raise ImageDecodeError(
            f"the image data must be a base64 string, got {type(data).__name__}"
        )
    if data.startswith("data:"):
        header, comma, payload = data.partition(",")
        if not comma:
            raise ImageDecodeError("the data: URL has no ',' before its payload")
        params = header[5:].split(";")
        declared = params[0] or declared
        if not any(p.strip().lower() == "base64" for p in params[1:]):
            return urllib.parse.unquote_to_bytes(payload), declared
        data = payload
    return _b64decode(data), declared


def _b64decode(text: str) -> bytes:
    """Strict base64 first (fast); then forgive line breaks, URL-safe chars, lost padding."""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as exc:  # binascii.Error, or a non-ASCII str
        first = exc
    cleaned = "".join(text.split()).translate(_URLSAFE)
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except ValueError:
        raise ImageDecodeError(
            f"the image data is not valid base64 ({first}); an ORS image block's 'data' "
            "must be the image file's bytes in standard base64 (RFC 4648)"
        ) from None


def _open(raw: bytes, declared: str) -> tuple[str, Image.Image]:
    """Identify the bytes among the allowed formats and read the header (no pixels yet)."""
    prefix = raw[:16]
    for fmt, factory, accept in _OPENERS:
        verdict = accept(prefix) if accept is not None else True
        if isinstance(verdict, str):  # e.g. "WEBP support not installed"
            raise ImageDecodeError(f"the {fmt} image cannot be read: {verdict}")
        if not verdict:
            continue
        try:
            if fmt in _CHECKS_INSIDE_OPEN:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                    return fmt, factory(io.BytesIO(raw), "")
            return fmt, factory(io.BytesIO(raw), "")
        except Image.DecompressionBombError as exc:
            raise ImageDecodeError(
                f"the {fmt} image is too large for pillow's Image.MAX_IMAGE_PIXELS guard "
                f"(a possible decompression bomb): {exc}"
            ) from None
        except Exception as exc:
            raise ImageDecodeError(f"corrupt or truncated {fmt} image: {_reason(exc)}") from None
    if declared and not declared.lower().startswith("image/"):
        what = f"the declared MIME type {declared!r} is not an image type and the bytes are"
    else:
        what = f"the bytes (declared {declared or 'without a MIME type'}) are"
    raise ImageDecodeError(
        f"{what} not a {_FORMAT_NAMES} image (they start with {raw[:8]!r})"
    )


def _to_rgb(im: Image.Image) -> Image.Image:
    """The image in mode RGB: alpha composited on white, 16-bit gray scaled down."""
    mode = im.mode
    if mode == "RGB" and "transparency" not in im.info:
        return im
    if mode.startswith("I"):  # "I;16*" from 16-bit gray PNG; "I" from older pillow
        gray = np.asarray(im).astype(np.int64) if mode == "I" else np.asarray(im)
        scaled = (np.clip(gray, 0, 65535) >> 8).astype(np.uint8)
        return Image.fromarray(np.repeat(scaled[:, :, None], 3, axis=2))
    if mode in _ALPHA_MODES or "transparency" in im.info:
        rgba = im if mode == "RGBA" else im.convert("RGBA")
        out = Image.new("RGB", rgba.size, _WHITE)
        out.paste(rgba, (0, 0), rgba)
        return out
    return im.convert("RGB")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- argument checks ----------------------------------------------------------------------


def _check_image_size(image_size: Any) -> tuple[int, int] | None:
    if image_size is None:
        return None
    if (
        not isinstance(image_size, (tuple, list))
        or len(image_size) != 2
        or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in image_size)
        or min(image_size) <= 0
    ):
        raise ValueError(
            "image_size must be None or a (height, width) pair of positive ints, "
            f"got {image_size!r}"
        )
    return int(image_size[0]), int(image_size[1])


def _check_max_pixels(max_pixels: Any) -> int:
    if (
        isinstance(max_pixels, bool)
        or not isinstance(max_pixels, (int, np.integer))
        or max_pixels <= 0
    ):
        raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}")
    return int(max_pixels)
