"""Gymnasium spaces for ORS actions and observations.

``AnyText`` and ``AnyImage`` are the leaf spaces: text that is any Python
``str`` (model output is full Unicode), and an image that is any HxWx3
``uint8`` array.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

__all__ = ["AnyImage", "AnyText"]


class AnyText(spaces.Text):
    """A ``Text`` space whose ``contains`` accepts any ``str`` up to ``max_length``.

    Gymnasium's ``Text`` checks every character against a charset; a full
    Unicode charset takes seconds and hundreds of MB to build, so this keeps
    the small default charset for ``sample()`` and skips it in ``contains``.
    """

    def __init__(self, max_length: int = 1_000_000, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length=max_length, min_length=min_length, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AnyText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"


class AnyImage(spaces.Space[NDArray[np.uint8]]):
    """Any ``uint8`` array of shape (H, W, 3): an RGB image of unknown size."""

    def __init__(self, max_side: int = 64, seed: Any = None) -> None:
        super().__init__(shape=None, dtype=np.uint8, seed=seed)
        self.max_side = max_side

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> NDArray[np.uint8]:
        h, w = (int(v) for v in self.np_random.integers(1, self.max_side + 1, size=2))
        return self.np_random.integers(0, 256, size=(h, w, 3), dtype=np.uint8)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, np.ndarray)
            and x.dtype == np.uint8
            and x.ndim == 3
            and x.shape[2] == 3
            and x.shape[0] > 0
            and x.shape[1] > 0
        )

    def to_jsonable(self, sample_n: Any) -> list[Any]:
        return [np.asarray(x).tolist() for x in sample_n]

    def from_jsonable(self, sample_n: list[Any]) -> list[NDArray[np.uint8]]:
        return [np.asarray(x, dtype=np.uint8) for x in sample_n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyImage)

    def __repr__(self) -> str:
        return "AnyImage(H, W, 3, uint8)"
