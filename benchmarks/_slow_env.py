"""``SlowStart``: an environment whose setup and tool each take a set time, for
``bench_batch`` (a hosted sandbox: seconds to start, seconds per tool)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402 - after the SDK's environment is set
    Environment,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
    tool,
)

__all__ = ["SETUP_S", "TOOL_S", "TURNS", "SlowStart"]

SETUP_S = 1.0
TOOL_S = 1.0
TURNS = 2  # the wait call that ends the episode


class SlowStart(Environment):
    """``setup()`` takes SETUP_S; ``wait`` takes TOOL_S and the TURNS-th call ends it."""

    def __init__(self, task_spec: JSONObject | None = None,
                 secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self.calls = 0

    async def setup(self) -> None:
        await asyncio.sleep(SETUP_S)

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": i} for i in range(4)]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Call wait until the episode ends.")]

    @tool
    async def wait(self) -> ToolOutput:
        """Take TOOL_S seconds; the TURNS-th call ends the episode with reward 1."""
        await asyncio.sleep(TOOL_S)
        self.calls += 1
        done = self.calls >= TURNS
        return ToolOutput(blocks=[TextBlock(text=f"waited {self.calls}")],
                          reward=1.0 if done else 0.0, finished=done)
