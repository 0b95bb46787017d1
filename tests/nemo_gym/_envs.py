"""``Graded``: a user's own SDK environment for the NeMo Gym tests.

``add`` moves a total toward the task's target (each call's reward parts:
``effort``), ``submit`` is the ``@terminal`` tool (arg ``answer``): reward 1.0 when
the answer is the target, with the parts ``correct`` and ``reached``. ``Graded.live``
counts the sessions the server holds: each instance counts until the server tears it
down (at deletion).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402 - after the SDK's environment is set
    Environment,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from pydantic import BaseModel  # noqa: E402

__all__ = ["Graded"]


class AddParams(BaseModel):
    n: int


class SubmitParams(BaseModel):
    answer: str


class Graded(Environment):
    """Reach the target with ``add``, then answer it (see the module docstring)."""

    live = 0
    _lock = threading.Lock()

    def __init__(
        self, task_spec: JSONObject | None = None, secrets: dict[str, str] | None = None
    ) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self.target = int((task_spec or {}).get("target", 0))
        self.total = 0
        self._counted = True
        with Graded._lock:
            Graded.live += 1

    async def teardown(self) -> None:
        with Graded._lock:
            if self._counted:
                self._counted = False
                Graded.live -= 1

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": i, "target": i + 2} for i in range(4)]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Reach {self.target} with add, then answer the total.")]

    @tool
    async def add(self, params: AddParams) -> ToolOutput:
        """Add n to the total."""
        self.total += params.n
        return ToolOutput(blocks=[TextBlock(text=f"total {self.total}")], reward=0.0,
                          metadata={"reward_parts": {"effort": 0.25}})

    @terminal
    @tool
    async def submit(self, params: SubmitParams) -> ToolOutput:
        """Answer the target: reward 1 if right; ends the episode."""
        correct = params.answer.strip() == str(self.target)
        parts = {"correct": float(correct), "reached": float(self.total == self.target)}
        return ToolOutput(blocks=[TextBlock(text="right" if correct else "wrong")],
                          reward=float(correct), finished=True,
                          metadata={"reward_parts": parts})
