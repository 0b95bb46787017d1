"""Observation wrappers: an ORS observation (text + images) as a fixed-shape array.

An ``OrsEnv`` observes ``{"text": str, "images": (HxWx3 uint8, ...)}``: neither
part has a fixed shape, which array-based RL libraries (Stable-Baselines3)
require. Each wrapper here keeps one part and gives it a ``Box`` space:

- ``ImageObservation``: one image, resized to a fixed size (CNN policies).
- ``TextVector``: the text, feature-hashed into a fixed-size vector (MLP policies).
- ``MetadataVector``: named numbers the environment reports in tool metadata
  or block ``detail`` (MLP policies; the most compact state when available).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, SupportsFloat, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from PIL import Image

__all__ = ["ImageObservation", "MetadataVector", "MissingValueError", "TextVector", "hash_text"]

logger = logging.getLogger("ors_gym")

_RESAMPLE = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
}

Bounds = float | Sequence[float] | Mapping[str, float | Sequence[float]]


# -- images ---------------------------------------------------------------------------------


def _to_rgb(image: NDArray[Any]) -> NDArray[np.uint8]:
    """An image array as HxWx3 uint8 (grey is repeated, alpha dropped)."""
    array = np.asarray(image)
    if array.dtype != np.uint8:
        array = np.clip(array, 0, 255).astype(np.uint8)
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    elif array.ndim == 3 and array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    elif array.ndim == 3 and array.shape[2] == 4:
        array = array[:, :, :3]
    if array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 image, got an array of shape {array.shape}")
    return array


class ImageObservation(gym.ObservationWrapper[NDArray[np.uint8], Any, dict[str, Any]]):
    """The observation's image as a fixed-shape ``uint8`` Box.

    ``size=(H, W)``: every image is resized to it with pillow (``resample``:
    nearest, bilinear, bicubic, lanczos or box; nearest keeps pixel-art grids
    crisp); an image of that size already is passed through untouched.
    ``index`` picks which of the step's images (default the last). A step with
    no image repeats the last image seen this episode (zeros before the first).

    ``channel_order="HWC"`` (default) gives ``(H, W, 3)``, which SB3's
    ``CnnPolicy`` accepts as is (it wraps the vec env in ``VecTransposeImage``);
    ``"CHW"`` gives ``(3, H, W)`` for policies that want channels first.
    SB3's default ``NatureCNN`` needs at least 36x36.
    """

    def __init__(
        self,
        env: gym.Env[dict[str, Any], Any],
        size: tuple[int, int] = (64, 64),
        channel_order: Literal["HWC", "CHW"] = "HWC",
        index: int = -1,
        *,
        resample: str = "bilinear",
    ) -> None:
        super().__init__(env)
        if (
            not isinstance(size, Sequence)
            or len(size) != 2
            or not all(isinstance(v, (int, np.integer)) and v > 0 for v in size)
        ):
            raise ValueError(f"size must be (height, width), two positive integers; got {size!r}")
        if channel_order not in ("HWC", "CHW"):
            raise ValueError(f"channel_order={channel_order!r}; choose 'HWC' or 'CHW'")
        if resample not in _RESAMPLE:
            raise ValueError(f"resample={resample!r}; choose one of {sorted(_RESAMPLE)}")
        self.size = (int(size[0]), int(size[1]))
        self.channel_order = channel_order
        self.index = int(index)
        self._resample = _RESAMPLE[resample]
        height, width = self.size
        shape = (height, width, 3) if channel_order == "HWC" else (3, height, width)
        self.observation_space = spaces.Box(0, 255, shape=shape, dtype=np.uint8)
        self._blank = np.zeros((height, width, 3), dtype=np.uint8)
        self._last = self._blank

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NDArray[np.uint8], dict[str, Any]]:
        self._last = self._blank
        return super().reset(seed=seed, options=options)

    def observation(self, observation: dict[str, Any]) -> NDArray[np.uint8]:
        images = observation.get("images") or ()
        if images:
            try:
                chosen = images[self.index]
            except IndexError:
                raise ValueError(
                    f"ImageObservation(index={self.index}) but the step has only {len(images)} "
                    "image(s); use index=-1 for the last one"
                ) from None
            self._last = self._resize(_to_rgb(chosen))
        out = self._last
        if self.channel_order == "CHW":
            return np.ascontiguousarray(out.transpose(2, 0, 1))
        return out.copy()

    def _resize(self, image: NDArray[np.uint8]) -> NDArray[np.uint8]:
        height, width = self.size
        if image.shape[0] == height and image.shape[1] == width:
            return image
        resized = Image.fromarray(image).resize((width, height), self._resample)
        return np.asarray(resized, dtype=np.uint8)


# -- text -----------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+")


def _grams(text: str, ngram: tuple[int, int]) -> Iterable[str]:
    tokens = _TOKEN.findall(text.lower())
    low, high = ngram
    for n in range(low, high + 1):
        for i in range(len(tokens) - n + 1):
            yield " ".join(tokens[i : i + n])


def hash_text(
    text: str, dim: int = 256, ngram: tuple[int, int] = (1, 2), seed: int = 0
) -> NDArray[np.float32]:
    """The feature-hashed vector of ``text`` (see ``TextVector`` for the exact encoding)."""
    key = str(int(seed)).encode("ascii")
    vector = np.zeros(dim, dtype=np.float64)
    for gram in _grams(text, ngram):
        digest = hashlib.blake2b(gram.encode("utf-8"), digest_size=8, key=key).digest()
        value = int.from_bytes(digest, "little")
        vector[value % dim] += -1.0 if value >> 63 else 1.0
    norm = float(np.linalg.norm(vector))
    if norm > 0:
        vector /= norm
    return vector.astype(np.float32)


class TextVector(gym.ObservationWrapper[NDArray[np.float32], Any, dict[str, Any]]):
    """The observation's text as a fixed-size ``float32`` vector, by feature hashing.

    The encoding, exactly (``hash_text``):

    1. lower-case the text (``str.lower``) and split it into tokens: the maximal
       runs of Unicode word characters (regex ``\\w+``), so punctuation and
       whitespace only separate tokens;
    2. features: for each ``n`` from ``ngram[0]`` to ``ngram[1]``, every run of
       ``n`` consecutive tokens joined by one space (``"goal at"``);
    3. each feature ``f`` is hashed with BLAKE2b (8-byte digest, key = the
       ASCII decimal digits of ``seed``) over ``f``'s UTF-8 bytes, read as a
       little-endian unsigned 64-bit integer ``h``; it adds ``+1`` (``h``'s top
       bit 0) or ``-1`` (top bit 1) at position ``h mod dim``;
    4. the vector is divided by its L2 norm (left all zeros when it is zero:
       empty text, or features that cancelled out).

    Features that collide at one position add up, so with a sign each, two
    colliding features may cancel; a larger ``dim`` makes collisions rarer.
    The hash is stable across processes and platforms (no ``hash()`` salt), so
    a trained policy sees the same vectors tomorrow. Values lie in ``[-1, 1]``.
    """

    def __init__(
        self,
        env: gym.Env[dict[str, Any], Any],
        dim: int = 256,
        ngram: tuple[int, int] = (1, 2),
        seed: int = 0,
        *,
        cache_size: int = 4096,
    ) -> None:
        super().__init__(env)
        if not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if (
            not isinstance(ngram, Sequence)
            or len(ngram) != 2
            or not all(isinstance(n, (int, np.integer)) for n in ngram)
            or not 1 <= ngram[0] <= ngram[1]
        ):
            raise ValueError(
                f"ngram must be (min_n, max_n) with 1 <= min_n <= max_n, got {ngram!r}"
            )
        if not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.dim = int(dim)
        self.ngram = (int(ngram[0]), int(ngram[1]))
        self.seed = int(seed)
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(self.dim,), dtype=np.float32)
        self._cached = functools.lru_cache(maxsize=cache_size)(self._encode)

    def _encode(self, text: str) -> NDArray[np.float32]:
        return hash_text(text, self.dim, self.ngram, self.seed)

    def encode(self, text: str) -> NDArray[np.float32]:
        """The vector for ``text`` (a fresh array; results are cached by text)."""
        return self._cached(text).copy()

    def observation(self, observation: dict[str, Any]) -> NDArray[np.float32]:
        return self.encode(str(observation.get("text", "")))


# -- structured values --------------------------------------------------------------------------


class MissingValueError(KeyError):
    """A ``MetadataVector`` key the step did not report (a ``KeyError`` with a readable message)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _detail_of(block: Any) -> Mapping[str, Any] | None:
    detail = block.get("detail") if isinstance(block, Mapping) else getattr(block, "detail", None)
    return detail if isinstance(detail, Mapping) else None


def _structured_values(info: Mapping[str, Any]) -> dict[str, Any]:
    """Named values of a step: its blocks' ``detail`` overlaid with the last call's metadata."""
    values: dict[str, Any] = {}
    for block in info.get("blocks") or ():
        detail = _detail_of(block)
        if detail:
            values.update(detail)
    calls = info.get("calls") or ()
    if calls:
        metadata = calls[-1].get("metadata") if isinstance(calls[-1], Mapping) else None
        if isinstance(metadata, Mapping):
            values.update(metadata)
    return values


def _flatten_numbers(value: Any, key: str) -> list[float]:
    if isinstance(value, (bool, int, float, np.integer, np.floating)):
        return [float(value)]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        out: list[float] = []
        for item in value:
            out.extend(_flatten_numbers(item, key))
        return out
    if isinstance(value, np.ndarray):
        return [float(v) for v in value.ravel()]
    raise ValueError(
        f"MetadataVector: value of {key!r} is {value!r}; only numbers, booleans and "
        "(nested) lists of them can go into a vector"
    )


class MetadataVector(gym.Wrapper[NDArray[np.float32], Any, dict[str, Any], Any]):
    """Named numeric values the environment reports, as a flat ``float32`` Box.

    ``keys``: names to read, in order; a list of names (one number each) or a
    mapping ``{name: length}`` for values that are lists (``{"agent": 2}`` for
    a ``[row, col]`` pair; nested lists are flattened row-major). Values are
    read from the step's ``info["calls"][-1]["metadata"]``, falling back to the
    ``detail`` of the step's blocks (``info["blocks"]``); on reset, from the
    prompt blocks' ``detail``. Booleans count as 0/1.

    ``low`` / ``high`` bound the Box: a number, one number per vector element,
    or a mapping ``{name: number or list}`` (missing names unbounded).
    ``normalize=True`` maps ``[low, high]`` linearly onto ``[-1, 1]`` (both
    must then be finite). A value outside the bounds raises ``ValueError``.

    A name missing from a step that reports values raises ``MissingValueError``
    (a ``KeyError``) naming it and the names that were there. A step that
    reports no values at all (a failed call, a nudge) repeats the previous vector.
    """

    def __init__(
        self,
        env: gym.Env[dict[str, Any], Any],
        keys: Sequence[str] | Mapping[str, int],
        low: Bounds = -math.inf,
        high: Bounds = math.inf,
        *,
        normalize: bool = False,
    ) -> None:
        super().__init__(cast(Any, env))  # gymnasium types Wrapper.__init__'s env as the outer env
        if isinstance(keys, str):
            raise TypeError(
                f"keys must be a list of names or a {{name: length}} dict, got {keys!r}"
            )
        lengths = dict(keys) if isinstance(keys, Mapping) else dict.fromkeys(keys, 1)
        if not lengths:
            raise ValueError("keys is empty; name at least one value to observe")
        for name, length in lengths.items():
            if not isinstance(length, (int, np.integer)) or length < 1:
                raise ValueError(f"keys[{name!r}] must be a positive length, got {length!r}")
        self.keys: dict[str, int] = {str(k): int(v) for k, v in lengths.items()}
        self.dim = sum(self.keys.values())
        self.low = self._bounds(low, "low")
        self.high = self._bounds(high, "high")
        if np.any(self.low > self.high):
            raise ValueError(f"low must not exceed high (low={self.low}, high={self.high})")
        self.normalize = bool(normalize)
        if self.normalize:
            if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high))):
                raise ValueError("normalize=True needs finite low and high bounds for every value")
            if np.any(self.low == self.high):
                raise ValueError("normalize=True needs low < high for every value")
            self.observation_space = spaces.Box(-1.0, 1.0, shape=(self.dim,), dtype=np.float32)
        else:
            self.observation_space = spaces.Box(
                self.low.astype(np.float32), self.high.astype(np.float32), dtype=np.float32
            )
        self._last: NDArray[np.float32] | None = None

    def _bounds(self, value: Bounds, what: str) -> NDArray[np.float64]:
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(self.keys))
            if unknown:
                raise ValueError(
                    f"{what} names {unknown}, which are not among keys {list(self.keys)}"
                )
            default = -math.inf if what == "low" else math.inf
            parts = []
            for name, length in self.keys.items():
                bound = np.asarray(value.get(name, default), dtype=np.float64).ravel()
                if bound.size not in (1, length):
                    raise ValueError(
                        f"{what}[{name!r}] has {bound.size} numbers; give 1 or {length}"
                    )
                parts.append(np.broadcast_to(bound, (length,)))
            return np.concatenate(parts)
        array = np.asarray(value, dtype=np.float64).ravel()
        if array.size not in (1, self.dim):
            raise ValueError(
                f"{what} has {array.size} numbers; give one, one per vector element "
                f"({self.dim}), or a {{name: bound}} dict"
            )
        return np.broadcast_to(array, (self.dim,)).copy()

    def vector(self, values: Mapping[str, Any]) -> NDArray[np.float32]:
        """The observation vector for ``values`` (a metadata/detail dict)."""
        parts: list[float] = []
        for name, length in self.keys.items():
            if name not in values:
                raise MissingValueError(
                    f"MetadataVector: {name!r} is not in this step's metadata or block detail; "
                    f"available: {sorted(values)}"
                )
            numbers = _flatten_numbers(values[name], name)
            if len(numbers) != length:
                raise ValueError(
                    f"MetadataVector: {name!r} holds {len(numbers)} number(s) ({values[name]!r}) "
                    f"but keys declares {length}"
                )
            parts.extend(numbers)
        raw = np.asarray(parts, dtype=np.float64)
        outside = (raw < self.low) | (raw > self.high)
        if np.any(outside):
            i = int(np.argmax(outside))
            raise ValueError(
                f"MetadataVector: element {i} ({self._element_name(i)}) = {raw[i]} is outside "
                f"[{self.low[i]}, {self.high[i]}]; widen low/high"
            )
        if self.normalize:
            raw = 2.0 * (raw - self.low) / (self.high - self.low) - 1.0
        return raw.astype(np.float32)

    def _element_name(self, i: int) -> str:
        for name, length in self.keys.items():
            if i < length:
                return f"{name}[{i}]" if length > 1 else name
            i -= length
        return "?"

    def _observe(self, info: Mapping[str, Any]) -> NDArray[np.float32]:
        values = _structured_values(info)
        if not values and self._last is not None:
            return self._last.copy()
        self._last = self.vector(values)
        return self._last.copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        self._last = None
        _, info = self.env.reset(seed=seed, options=options)
        return self._observe(info), info

    def step(
        self, action: Any
    ) -> tuple[NDArray[np.float32], SupportsFloat, bool, bool, dict[str, Any]]:
        _, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(info), reward, terminated, truncated, info
