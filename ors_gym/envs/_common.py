"""Small helpers shared by the bundled environments (SDK-side code only).

Kept private: the bundled environments are examples and test fixtures, and
these helpers exist only so each environment module stays about its own idea.
"""

from __future__ import annotations

import base64
import io
import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from openreward.environments import (
    Environment,
    ImageBlock,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
)
from openreward.environments.types import SplitType
from PIL import Image

__all__ = [
    "BundledEnvironment",
    "png_b64",
    "png_block",
    "seeded_rng",
    "text_output",
]


def seeded_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from ``parts`` without ``hash()``.

    Seeding with a str uses SHA-512 internally, so the stream is the same in
    every process regardless of ``PYTHONHASHSEED``: task ``i`` of a split is
    always the same task.
    """
    return random.Random(":".join(str(p) for p in parts))


def png_b64(image: Image.Image) -> str:
    """Encode a pillow image as base64 PNG text (what an ImageBlock carries)."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def png_block(image: Image.Image, detail: Mapping[str, Any] | None = None) -> ImageBlock:
    """An ``image/png`` ImageBlock holding ``image``."""
    return ImageBlock(data=png_b64(image), mimeType="image/png", detail=detail)


def text_output(
    text: str,
    *,
    reward: float | None = 0.0,
    finished: bool = False,
    metadata: Mapping[str, Any] | None = None,
    detail: Mapping[str, Any] | None = None,
) -> ToolOutput:
    """A ToolOutput holding one text block."""
    return ToolOutput(
        blocks=[TextBlock(text=text, detail=detail)],
        reward=reward,
        finished=finished,
        metadata=metadata,
    )


class BundledEnvironment(Environment):
    """What every bundled environment does alike: the SDK constructor, the splits, their check.

    A subclass reads its task spec in :meth:`_read_task` (the constructor has
    already made a missing spec ``{}``) and names its splits in ``split_names``.
    """

    #: The splits, each name also its SDK split type.
    split_names: ClassVar[tuple[SplitType, ...]] = ("train", "test")

    def __init__(
        self, task_spec: JSONObject | None = None, secrets: dict[str, str] | None = None
    ) -> None:
        task_spec = task_spec or {}
        super().__init__(task_spec, secrets or {})
        self._read_task(task_spec)

    def _read_task(self, task_spec: JSONObject) -> None:
        """Check and keep what this environment needs from its task spec (default: nothing)."""

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return [Split(name=name, type=name) for name in cls.split_names]

    @classmethod
    def _check_split(cls, split: str) -> None:
        """Raise a clear ``ValueError`` for a split this environment does not have."""
        names = [s if isinstance(s, str) else s.name for s in cls.list_splits()]
        if split not in names:
            raise ValueError(f"{cls.__name__} has no split {split!r}; choose one of {names}")
