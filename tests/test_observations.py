"""Blocks -> observations: formats, modes, resizing, broken input, block shapes, spaces."""

from __future__ import annotations

import base64
import io
import struct
import urllib.parse
import warnings
import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, features

from ors_gym import protocol
from ors_gym.observations import (
    DEFAULT_MAX_PIXELS,
    DecodedBlocks,
    ImageDecodeError,
    decode_blocks,
    decode_image,
    empty_observation,
    observation_space,
)
from ors_gym.serving import quiet_sdk_logging

# -- helpers ------------------------------------------------------------------------------


def _raw(im: Image.Image, fmt: str = "PNG", **save: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **save)
    return buf.getvalue()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _image(raw: bytes | str, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "data": raw if isinstance(raw, str) else _b64(raw), "mimeType": mime}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _noise(h: int, w: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    shape = (h, w, channels) if channels > 1 else (h, w)
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def _pillow_rgb(raw: bytes) -> np.ndarray:
    """Pillow's own decode: what ors_gym must match for modes it converts plainly."""
    return np.asarray(Image.open(io.BytesIO(raw)).convert("RGB"))


def _one(raw: bytes | str, mime: str = "image/png", **kwargs: Any) -> np.ndarray:
    decoded = decode_blocks([_image(raw, mime)], **kwargs)
    assert decoded.notes == ()
    (array,) = decoded.observation["images"]
    return array


def _chunk(tag: bytes, payload: bytes) -> bytes:
    crc = struct.pack(">I", zlib.crc32(tag + payload))
    return struct.pack(">I", len(payload)) + tag + payload + crc


def _png_bytes(width: int, height: int, idat: bytes, *, bit_depth: int = 1) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", idat)
        + _chunk(b"IEND", b"")
    )


def _bomb_png(side: int) -> bytes:
    """A valid all-black 1-bit side x side PNG: tens of KB that decode to side**2 pixels."""
    row = bytes(1 + (side + 7) // 8)  # filter byte + packed bits
    rows_per_feed = 500
    comp = zlib.compressobj(9)
    parts = [comp.compress(row * rows_per_feed) for _ in range(side // rows_per_feed)]
    parts.append(comp.compress(row * (side % rows_per_feed)))
    parts.append(comp.flush())
    return _png_bytes(side, side, b"".join(parts))


def _gif_with_frame(side: int) -> bytes:
    """A GIF whose 1x1 screen holds a first frame declared side x side."""
    return (
        b"GIF89a"
        + struct.pack("<HH", 1, 1)
        + b"\x00\x00\x00"
        + b","
        + struct.pack("<HHHH", 0, 0, side, side)
        + b"\x00\x02\x02\x4c\x01\x00;"
    )


@pytest.fixture(scope="module")
def rgb_png() -> tuple[np.ndarray, bytes]:
    pixels = _noise(24, 40)
    return pixels, _raw(Image.fromarray(pixels))


# -- formats and modes --------------------------------------------------------------------


def test_rgb_png_round_trips_exactly(rgb_png: tuple[np.ndarray, bytes]) -> None:
    pixels, raw = rgb_png
    array = _one(raw)
    assert array.shape == (24, 40, 3) and array.dtype == np.uint8
    np.testing.assert_array_equal(array, pixels)


def test_arrays_are_fresh_writeable_and_contiguous(rgb_png: tuple[np.ndarray, bytes]) -> None:
    pixels, raw = rgb_png
    first, second = _one(raw), _one(raw)
    assert first.flags.writeable and first.flags.c_contiguous
    assert not np.shares_memory(first, second)
    first += 1  # in-place writes work and touch only this observation
    np.testing.assert_array_equal(second, pixels)
    np.testing.assert_array_equal(_one(raw), pixels)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: Image.fromarray(_noise(16, 20, 1)), id="L"),
        pytest.param(lambda: Image.fromarray(_noise(16, 20)).convert("1"), id="1-bit"),
        pytest.param(
            lambda: Image.fromarray(_noise(16, 20)).convert("P", palette=Image.Palette.ADAPTIVE),
            id="palette",
        ),
        pytest.param(lambda: Image.fromarray(_noise(16, 20)), id="RGB"),
    ],
)
def test_png_modes_match_pillows_conversion(make: Any) -> None:
    raw = _raw(make())
    array = _one(raw)
    assert array.shape == (16, 20, 3)
    np.testing.assert_array_equal(array, _pillow_rgb(raw))


def test_grayscale_gives_three_equal_channels() -> None:
    gray = _noise(8, 9, 1)
    array = _one(_raw(Image.fromarray(gray)))
    for c in range(3):
        np.testing.assert_array_equal(array[:, :, c], gray)


def test_jpeg_matches_pillows_decode() -> None:
    raw = _raw(Image.fromarray(_noise(32, 48)), "JPEG", quality=85)
    array = _one(raw, "image/jpeg")
    assert array.shape == (32, 48, 3)
    np.testing.assert_array_equal(array, _pillow_rgb(raw))


def test_cmyk_jpeg_is_converted_to_rgb() -> None:
    raw = _raw(Image.new("CMYK", (12, 10), (0, 255, 255, 0)), "JPEG", quality=95)
    array = _one(raw, "image/jpeg")
    assert array.shape == (10, 12, 3)
    np.testing.assert_array_equal(array, _pillow_rgb(raw))
    assert array[..., 0].min() > 200 and array[..., 1:].max() < 60  # cyan-less, i.e. red


@pytest.mark.skipif(not features.check("webp"), reason="pillow built without WebP")
def test_lossless_webp_round_trips_exactly() -> None:
    pixels = _noise(20, 30)
    array = _one(_raw(Image.fromarray(pixels), "WEBP", lossless=True), "image/webp")
    np.testing.assert_array_equal(array, pixels)


def test_gif_gives_its_first_frame() -> None:
    red, blue = Image.new("RGB", (10, 6), (255, 0, 0)), Image.new("RGB", (10, 6), (0, 0, 255))
    raw = _raw(red, "GIF", save_all=True, append_images=[blue])
    assert getattr(Image.open(io.BytesIO(raw)), "n_frames", 1) == 2
    array = _one(raw, "image/gif")
    assert array.shape == (6, 10, 3)
    assert (array == (255, 0, 0)).all()


def test_bmp_round_trips_exactly() -> None:
    pixels = _noise(7, 5)
    np.testing.assert_array_equal(_one(_raw(Image.fromarray(pixels), "BMP"), "image/bmp"), pixels)


def test_rgba_is_composited_on_white() -> None:
    rgba = np.zeros((2, 3, 4), np.uint8)
    rgba[0, 0] = (10, 20, 30, 0)  # transparent -> white
    rgba[0, 1] = (10, 20, 30, 255)  # opaque -> itself
    rgba[0, 2] = (0, 0, 0, 128)  # half black over white -> mid grey
    array = _one(_raw(Image.fromarray(rgba)))
    assert array.shape == (2, 3, 3)
    assert tuple(array[0, 0]) == (255, 255, 255)
    assert tuple(array[0, 1]) == (10, 20, 30)
    assert all(abs(int(v) - 127) <= 2 for v in array[0, 2])


def test_la_is_composited_on_white() -> None:
    la = Image.new("LA", (4, 2), (40, 0))
    la.putpixel((0, 0), (40, 255))
    array = _one(_raw(la))
    assert tuple(array[0, 0]) == (40, 40, 40)
    assert tuple(array[1, 3]) == (255, 255, 255)


def test_palette_transparency_is_composited_on_white() -> None:
    im = Image.new("P", (4, 4), 1)
    im.putpalette([0, 0, 0, 200, 10, 10] + [0] * (256 * 3 - 6))
    im.putpixel((0, 0), 0)
    raw = _raw(im, transparency=0)
    array = _one(raw)
    assert tuple(array[0, 0]) == (255, 255, 255)  # index 0 is transparent
    assert tuple(array[3, 3]) == (200, 10, 10)


def test_16_bit_grayscale_is_scaled_not_clipped() -> None:
    gray = np.array([[0, 1000, 32768, 65535]], dtype=np.uint16)
    raw = _raw(Image.fromarray(gray))
    assert Image.open(io.BytesIO(raw)).mode.startswith("I")
    array = _one(raw)
    assert array.shape == (1, 4, 3)
    assert array[0, :, 0].tolist() == [0, 3, 128, 255]


def test_format_comes_from_the_bytes_not_the_mime_type(rgb_png: tuple[np.ndarray, bytes]) -> None:
    pixels, raw = rgb_png
    for mime in ("image/jpeg", "text/plain", "", "application/octet-stream"):
        np.testing.assert_array_equal(_one(raw, mime), pixels)


# -- resizing ------------------------------------------------------------------------------


@pytest.mark.parametrize(("h", "w"), [(16, 24), (64, 80), (24, 40), (1, 1)])
@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF"])
def test_image_size_gives_that_shape(fmt: str, h: int, w: int) -> None:
    raw = _raw(Image.new("RGB", (40, 24), (12, 34, 56)), fmt)
    array = _one(raw, image_size=(h, w))
    assert array.shape == (h, w, 3) and array.dtype == np.uint8
    assert array.flags.writeable and array.flags.c_contiguous
    # a flat colour stays that colour whatever the filter (JPEG/GIF are lossy)
    assert np.abs(array.astype(int) - (12, 34, 56)).max() <= 6


def test_downscale_is_smooth_and_keeps_order() -> None:
    ramp = np.tile(np.linspace(0, 255, 400).astype(np.uint8), (100, 1))
    array = _one(_raw(Image.fromarray(ramp)), image_size=(10, 20))
    row = array[5, :, 0].astype(int)
    assert (np.diff(row) > 0).all()  # still a ramp, left to right
    assert row[0] < 20 and row[-1] > 235


def test_large_jpeg_shrinks_to_the_requested_shape() -> None:
    big = Image.new("RGB", (1600, 1200), (90, 160, 30))
    array = _one(_raw(big, "JPEG", quality=90), "image/jpeg", image_size=(30, 40))
    assert array.shape == (30, 40, 3)
    assert np.abs(array.astype(int) - (90, 160, 30)).max() <= 4


def test_resize_of_an_image_already_at_size_is_exact(rgb_png: tuple[np.ndarray, bytes]) -> None:
    pixels, raw = rgb_png
    np.testing.assert_array_equal(_one(raw, image_size=(24, 40)), pixels)


# -- data encodings ----------------------------------------------------------------------


def test_data_url_and_lenient_base64_forms(rgb_png: tuple[np.ndarray, bytes]) -> None:
    pixels, raw = rgb_png
    forms = {
        "data url": "data:image/png;base64," + _b64(raw),
        "percent data url": "data:image/png," + urllib.parse.quote_from_bytes(raw),
        "line-wrapped": base64.encodebytes(raw).decode(),
        "url-safe unpadded": base64.urlsafe_b64encode(raw).decode().rstrip("="),
    }
    for name, data in forms.items():
        array = decode_image(data, "image/png")
        assert np.array_equal(array, pixels), name


def test_decode_image_takes_raw_bytes(rgb_png: tuple[np.ndarray, bytes]) -> None:
    pixels, raw = rgb_png
    np.testing.assert_array_equal(decode_image(raw, None), pixels)
    np.testing.assert_array_equal(decode_image(bytearray(raw), "image/png"), pixels)


def test_base64_passed_as_bytes_is_reported(rgb_png: tuple[np.ndarray, bytes]) -> None:
    _, raw = rgb_png
    with pytest.raises(ImageDecodeError, match="not a PNG, JPEG"):
        decode_image(_b64(raw).encode(), "image/png")


# -- broken input: a note, never an exception ---------------------------------------------

_GOOD = _raw(Image.new("RGB", (3, 2), (1, 2, 3)))
_NOISY = _raw(Image.fromarray(_noise(64, 64)))

BROKEN: dict[str, tuple[Any, str, str]] = {
    # name: (data, mime, expected substring of the reason)
    "invalid base64": ("this is not base64!!", "image/png", "not valid base64"),
    "non-ascii text": ("ïmage", "image/png", "not valid base64"),
    "empty": ("", "image/png", "empty"),
    "truncated png": (_b64(_NOISY[: len(_NOISY) // 2]), "image/png", "truncated"),
    "png header only": (_b64(_NOISY[:33]), "image/png", "truncated"),
    "corrupt png": (_b64(_NOISY[:8] + b"\0" * 40), "image/png", "corrupt or truncated PNG"),
    "zero width png": (_b64(_png_bytes(0, 5, zlib.compress(b"\0" * 5))), "image/png", "PNG"),
    "non-image mime": (_b64(b"%PDF-1.4 not an image"), "application/pdf", "'application/pdf'"),
    "unknown image mime": (_b64(b"\0\1\2\3" * 8), "image/x-weird", "not a PNG, JPEG"),
    "unsupported format (tiff)": (
        _b64(_raw(Image.new("RGB", (4, 4)), "TIFF")),
        "image/tiff",
        "not a PNG, JPEG, WebP, GIF or BMP",
    ),
    "data url without comma": ("data:image/png;base64", "image/png", "no ','"),
    "not a string": (12345, "image/png", "must be a base64 string"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_image_becomes_a_note_in_place(name: str) -> None:
    data, mime, reason = BROKEN[name]
    blocks = [
        _text("before"),
        {"type": "image", "data": data, "mimeType": mime},
        _text("after"),
        _image(_GOOD),
    ]
    decoded = decode_blocks(blocks)
    assert len(decoded.notes) == 1
    (note,) = decoded.notes
    assert note.startswith("[image 1 could not be decoded: ") and note.endswith("]")
    assert reason in note
    assert decoded.observation["text"] == f"before\n{note}\nafter"
    (good,) = decoded.observation["images"]
    assert good.shape == (2, 3, 3)


@pytest.mark.parametrize("name", list(BROKEN))
def test_decode_image_raises_a_value_error_naming_the_problem(name: str) -> None:
    data, mime, reason = BROKEN[name]
    with pytest.raises(ImageDecodeError, match=None) as info:
        decode_image(data, mime)
    assert isinstance(info.value, ValueError)
    assert reason in str(info.value)


def test_image_numbers_count_every_image_block() -> None:
    decoded = decode_blocks([_image(_GOOD), _image("@@"), _image(_GOOD), _image("")])
    assert len(decoded.observation["images"]) == 2
    assert [n.split(" could")[0] for n in decoded.notes] == ["[image 2", "[image 4"]


def test_image_block_without_data_is_a_note() -> None:
    decoded = decode_blocks([{"type": "image", "mimeType": "image/png"}])
    assert decoded.observation["images"] == ()
    assert "no 'data' field" in decoded.notes[0]


# -- decompression bombs ------------------------------------------------------------------


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _bomb_png(20_000)


def test_bomb_png_is_a_real_bomb(bomb: bytes) -> None:
    assert len(bomb) < 100_000  # ~50 KB for 400 million pixels
    with pytest.raises(Image.DecompressionBombError):  # pillow's own guard agrees
        Image.open(io.BytesIO(bomb))


def test_bomb_is_refused_before_decoding_without_warnings(bomb: bytes) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any pillow warning would fail the test
        decoded = decode_blocks([_text("look"), _image(bomb)])
    assert decoded.observation["images"] == ()
    (note,) = decoded.notes
    assert "20000x20000" in note and "max_pixels" in note and "decompression bomb" in note
    assert Image.MAX_IMAGE_PIXELS is not None  # the global guard is left alone


def test_size_between_pillows_warning_and_error_does_not_warn() -> None:
    raw = _bomb_png(10_000)  # 1e8 pixels: pillow would warn, not raise
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ImageDecodeError, match="10000x10000"):
            decode_image(raw, "image/png")


@pytest.mark.parametrize("side", [12_000, 20_000])
def test_gif_frame_bomb_is_a_note_without_warnings(side: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decoded = decode_blocks([_image(_gif_with_frame(side), "image/gif")])
    assert decoded.observation["images"] == ()
    assert "decompression bomb" in decoded.notes[0]


def test_max_pixels_is_configurable() -> None:
    raw = _raw(Image.new("RGB", (100, 60)))
    assert _one(raw, max_pixels=6000).shape == (60, 100, 3)
    decoded = decode_blocks([_image(raw)], max_pixels=5999)
    assert decoded.observation["images"] == ()
    assert "100x60 = 6,000 pixels" in decoded.notes[0]
    assert DEFAULT_MAX_PIXELS == 4096 * 4096


# -- block shapes -------------------------------------------------------------------------


def test_text_blocks_join_with_newlines_in_order() -> None:
    decoded = decode_blocks([_text("a"), _text(""), _text("b\nc")])
    assert decoded == DecodedBlocks({"text": "a\n\nb\nc", "images": ()}, ())


def test_any_iterable_of_blocks_is_accepted() -> None:
    blocks = [_text("a"), _image(_GOOD)]
    for form in (tuple(blocks), iter(blocks), (b for b in blocks)):
        decoded = decode_blocks(form)
        assert decoded.observation["text"] == "a" and len(decoded.observation["images"]) == 1


def test_no_blocks_is_the_empty_observation() -> None:
    assert decode_blocks([]).observation == empty_observation() == {"text": "", "images": ()}


def _same(a: DecodedBlocks, b: DecodedBlocks) -> bool:
    images_a, images_b = a.observation["images"], b.observation["images"]
    return (
        a.observation["text"] == b.observation["text"]
        and a.notes == b.notes
        and len(images_a) == len(images_b)
        and all(np.array_equal(x, y) for x, y in zip(images_a, images_b, strict=True))
    )


def test_protocol_models_sdk_objects_and_dicts_agree(rgb_png: tuple[np.ndarray, bytes]) -> None:
    quiet_sdk_logging()
    from openreward.environments import types as sdk

    pixels, raw = rgb_png
    data = _b64(raw)
    as_dicts = decode_blocks([_text("hello"), _image(data), _text("bye")])
    as_models = decode_blocks(
        [
            protocol.TextBlock(text="hello"),
            protocol.ImageBlock(data=data, mimeType="image/png"),
            protocol.TextBlock(text="bye"),
        ]
    )
    as_sdk = decode_blocks(
        [
            sdk.TextBlock(text="hello"),
            sdk.ImageBlock(data=data, mimeType="image/png"),
            sdk.TextBlock(text="bye"),
        ]
    )
    parsed = protocol.parse(
        protocol.ToolOutput,
        {"blocks": [_text("hello"), _image(data), _text("bye")], "reward": 1.0},
        what="test",
    )
    from_wire = decode_blocks(parsed.blocks)
    assert as_dicts.observation["text"] == "hello\nbye"
    np.testing.assert_array_equal(as_dicts.observation["images"][0], pixels)
    for other in (as_models, as_sdk, from_wire):
        assert _same(as_dicts, other)


def test_message_blocks_are_rendered_not_dropped() -> None:
    quiet_sdk_logging()
    from openreward.environments import types as sdk

    data = _b64(_GOOD)
    expected_text = "\n".join(
        [
            "[reasoning] add them",
            '[tool_call add id=c1] {"a": 1, "b": 2}',
            "[tool_result id=c1]",
            "3",
            "[tool_result id=c2 error]",
            "boom",
        ]
    )
    sdk_blocks = [
        sdk.ReasoningBlock(text="add them"),
        sdk.ToolCallBlock(id="c1", name="add", input={"a": 1, "b": 2}),
        sdk.ToolResultBlock(
            tool_call_id="c1",
            blocks=[sdk.TextBlock(text="3"), sdk.ImageBlock(data=data, mimeType="image/png")],
        ),
        sdk.ToolResultBlock(tool_call_id="c2", blocks=[sdk.TextBlock(text="boom")], is_error=True),
    ]
    wire = [block.model_dump() for block in sdk_blocks]
    models = [protocol.parse(protocol.MessageBlock, block, what="test") for block in wire]
    for blocks in (sdk_blocks, wire, models):
        decoded = decode_blocks(blocks)
        assert decoded.observation["text"] == expected_text
        assert decoded.notes == ()
        (image,) = decoded.observation["images"]
        assert tuple(image[0, 0]) == (1, 2, 3)


def test_unknown_blocks_become_notes() -> None:
    decoded = decode_blocks([_text("x"), {"type": "audio", "data": "..."}, 42, {"text": "no type"}])
    assert decoded.observation["text"].split("\n")[0] == "x"
    assert decoded.notes == (
        "[unsupported block type 'audio' skipped]",
        "[unsupported block type int (no type) skipped]",
        "[unsupported block type dict (no type) skipped]",
    )
    assert all(note in decoded.observation["text"] for note in decoded.notes)


def test_a_text_block_without_text_is_a_note() -> None:
    decoded = decode_blocks([{"type": "text", "text": None}])
    assert decoded.notes == ("[text block without a text string: NoneType]",)


def test_blocks_that_are_not_a_list_are_a_note() -> None:
    decoded = decode_blocks("just a string")
    assert decoded.observation == {"text": decoded.notes[0], "images": ()}
    assert "list of blocks" in decoded.notes[0]


# -- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [(0, 5), (5,), (5, 5, 3), "ab", (True, 3), (2.0, 3), [-1, 4]])
def test_bad_image_size_is_a_value_error(bad: Any) -> None:
    with pytest.raises(ValueError, match="image_size"):
        decode_blocks([], image_size=bad)
    with pytest.raises(ValueError, match="image_size"):
        observation_space(bad)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_bad_max_pixels_is_a_value_error(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_pixels"):
        decode_blocks([], max_pixels=bad)


# -- spaces -------------------------------------------------------------------------------


def test_space_without_image_size_contains_observations_of_any_shape() -> None:
    space = observation_space()
    decoded = decode_blocks(
        [_text("t"), _image(_GOOD), _image(_raw(Image.new("L", (7, 9)))), _image("@@")]
    )
    shapes = [a.shape for a in decoded.observation["images"]]
    assert shapes == [(2, 3, 3), (9, 7, 3)]
    assert space.contains(decoded.observation)
    assert space.contains(empty_observation())
    assert not space.contains({"text": "t", "images": [decoded.observation["images"][0]]})


def test_space_with_image_size_contains_resized_observations() -> None:
    space = observation_space(image_size=(16, 12))
    blocks = [_text("t"), _image(_GOOD), _image(_NOISY)]
    resized = decode_blocks(blocks, image_size=(16, 12)).observation
    assert [a.shape for a in resized["images"]] == [(16, 12, 3), (16, 12, 3)]
    assert space.contains(resized)
    assert space.contains(empty_observation())
    assert not space.contains(decode_blocks(blocks).observation)  # native sizes differ


def test_space_bounds_text_length() -> None:
    space = observation_space(max_text_length=5)
    assert space.contains(decode_blocks([_text("12345")]).observation)
    assert not space.contains(decode_blocks([_text("123456")]).observation)


# -- fuzzing: arbitrary bytes never raise --------------------------------------------------


def _never_raises(blocks: list[Any]) -> DecodedBlocks:
    decoded = decode_blocks(blocks, image_size=(8, 8))
    assert len(decoded.observation["images"]) + len(decoded.notes) == 1
    assert observation_space((8, 8)).contains(decoded.observation)
    return decoded


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(["image/png", "image/gif", "", "text/plain"]))
def test_random_bytes_never_raise(payload: bytes, mime: str) -> None:
    _never_raises([_image(payload, mime)])


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_random_strings_never_raise(data: str) -> None:
    _never_raises([{"type": "image", "data": data, "mimeType": "image/png"}])


_SMALL = {
    fmt: _raw(Image.fromarray(_noise(12, 10)), fmt) for fmt in ("PNG", "JPEG", "GIF", "BMP")
}


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(_SMALL)),
    st.integers(min_value=0),
    st.integers(min_value=0, max_value=255),
    st.booleans(),
)
def test_damaged_images_never_raise(fmt: str, where: int, value: int, truncate: bool) -> None:
    raw = bytearray(_SMALL[fmt])
    where %= len(raw)
    if truncate:
        damaged = bytes(raw[:where])
    else:
        raw[where] = value
        damaged = bytes(raw)
    _never_raises([_image(damaged)])
