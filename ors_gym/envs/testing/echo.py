"""Echo: a protocol test bench (large results, slow calls, failures, images).

- ``echo(text, repeat)`` returns ``text * repeat``: results far above the
  server's 4096-character SSE chunk size, to exercise chunk reassembly.
- ``slow_count(token, seconds)`` increments a per-process counter for
  ``token`` *before* sleeping, then returns the count; ``count(token)`` reads
  it without incrementing, so a test can check a reconnected call ran once.
- ``fail(message)`` raises ``RuntimeError(message)``: the server answers an
  SSE ``error`` event.
- ``image(width, height)`` returns a PNG of exactly that size.
- ``finish(reward)`` ends the episode with the given reward.
All other results have reward 0 and leave the episode running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import ClassVar

from openreward.environments import (
    JSONObject,
    TextBlock,
    ToolOutput,
    tool,
)
from PIL import Image
from pydantic import BaseModel, Field, model_validator

from ors_gym.envs._common import BundledEnvironment, png_block, text_output

__all__ = ["MAX_ECHO_CHARS", "Echo"]

#: Upper bound on ``len(text) * repeat`` so one call cannot exhaust the server's memory.
MAX_ECHO_CHARS = 10_000_000
_MAX_IMAGE_SIDE = 4096


class EchoInput(BaseModel):
    """Input of ``echo``."""

    text: str = Field(description="Text to repeat.")
    repeat: int = Field(default=1, ge=1, le=100_000, description="How many copies to return.")

    @model_validator(mode="after")
    def _bounded(self) -> EchoInput:
        if len(self.text) * self.repeat > MAX_ECHO_CHARS:
            raise ValueError(
                f"len(text) * repeat = {len(self.text) * self.repeat} exceeds "
                f"{MAX_ECHO_CHARS} characters; use a shorter text or fewer repeats"
            )
        return self


class SlowCountInput(BaseModel):
    """Input of ``slow_count``."""

    token: str = Field(description="Counter key; use a fresh one per test.")
    seconds: float = Field(default=0.0, ge=0.0, le=2.0, description="How long to sleep.")


class TokenInput(BaseModel):
    """Input of ``count``."""

    token: str = Field(description="Counter key.")


class FailInput(BaseModel):
    """Input of ``fail``."""

    message: str = Field(description="The message of the RuntimeError to raise.")


class ImageInput(BaseModel):
    """Input of ``image``."""

    width: int = Field(ge=1, le=_MAX_IMAGE_SIDE, description="Width in pixels.")
    height: int = Field(ge=1, le=_MAX_IMAGE_SIDE, description="Height in pixels.")


class FinishInput(BaseModel):
    """Input of ``finish``."""

    reward: float = Field(allow_inf_nan=False, description="The reward to end the episode with.")


class Echo(BundledEnvironment):
    """Tools that echo, sleep, fail, draw and finish on request, for protocol tests."""

    split_names = ("train",)

    #: token -> number of ``slow_count`` calls that started, shared by all sessions of this process.
    counts: ClassVar[dict[str, int]] = {}

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        return [{"id": f"train-{i}", "note": f"echo task {i}"} for i in range(3)]

    async def get_prompt(self) -> list[TextBlock]:
        note = self.task_spec.get("note", "")
        return [
            TextBlock(
                text=f"Echo test bench ({note}): echo, slow_count, count, fail, image, finish."
            )
        ]

    @tool
    async def echo(self, params: EchoInput) -> ToolOutput:
        """Return the text repeated `repeat` times (reward 0)."""
        result = params.text * params.repeat
        return text_output(result, metadata={"length": len(result)})

    @tool
    async def slow_count(self, params: SlowCountInput) -> ToolOutput:
        """Count one call for `token`, sleep `seconds`, then return the count (reward 0)."""
        counts = type(self).counts
        counts[params.token] = counts.get(params.token, 0) + 1
        await asyncio.sleep(params.seconds)
        count = counts[params.token]
        return text_output(str(count), metadata={"token": params.token, "count": count})

    @tool
    async def count(self, params: TokenInput) -> ToolOutput:
        """Return how many slow_count calls started for `token`, without counting (reward 0)."""
        count = type(self).counts.get(params.token, 0)
        return text_output(str(count), metadata={"token": params.token, "count": count})

    @tool
    async def fail(self, params: FailInput) -> ToolOutput:
        """Raise RuntimeError(message): the server answers an SSE error event."""
        raise RuntimeError(params.message)

    @tool
    async def image(self, params: ImageInput) -> ToolOutput:
        """Return a width x height PNG (a colour gradient) and its size as text (reward 0)."""
        size_px = (params.width, params.height)
        vertical = Image.linear_gradient("L")
        horizontal = vertical.transpose(Image.Transpose.ROTATE_90)
        picture = Image.merge(
            "RGB",
            (vertical.resize(size_px), horizontal.resize(size_px), Image.new("L", size_px, 128)),
        )
        size = {"width": params.width, "height": params.height}
        return ToolOutput(
            blocks=[TextBlock(text=f"{params.width}x{params.height} image"), png_block(picture)],
            metadata=size,
            reward=0.0,
        )

    @tool
    async def finish(self, params: FinishInput) -> ToolOutput:
        """End the episode with the given reward."""
        return text_output(
            f"Finished with reward {params.reward}.", reward=params.reward, finished=True
        )
