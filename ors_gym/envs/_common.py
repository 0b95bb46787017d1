"""Small helpers shared by the bundled environments (SDK-side code only).

Kept private: the bundled environments are examples and test fixtures, and
these helpers exist only so each environment module stays about its own idea.
"""

from __future__ import annotations

import base64
import io
import random
from collections.abc import Mapping, Sequence
from typing import Any

from openreward.environments import ImageBlock, Split, TextBlock, ToolOutput
from PIL import Image

__all__ = [
    "check_split",
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


def check_split(env_name: str, split: str, splits: Sequence[Split | str]) -> None:
    """Raise a clear ``ValueError`` for a split the environment does not have."""
    names = [s if isinstance(s, str) else s.name for s in splits]
    if split not in names:
        raise ValueError(f"{env_name} has no split {split!r}; choose one of {names}")


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
