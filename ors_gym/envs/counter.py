"""Counter: reach a target number with ``increment``/``decrement``, then call ``done``.

The counter starts at the task's ``start`` (default 0). ``done`` is the
environment's ``@terminal`` tool and takes no argument (``arg`` is null): it
grades from state, reward 1.0 when the counter equals ``target`` else 0.0, and
ends the episode. Other steps give reward 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from openreward.environments import (
    JSONObject,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from pydantic import BaseModel, Field

from ors_gym.envs._common import BundledEnvironment, seeded_rng, text_output

__all__ = ["Counter"]

_SIZES = {"train": 50, "test": 10}


class IncrementInput(BaseModel):
    """Input of ``increment``."""

    amount: int = Field(default=1, ge=1, le=5, description="How much to add (1 to 5).")


class Counter(BundledEnvironment):
    """Move a counter to a target value, then call ``done`` to be graded."""

    def _read_task(self, task_spec: JSONObject) -> None:
        if "target" not in task_spec:
            raise ValueError("a Counter task needs a 'target' integer")
        self.target = int(task_spec["target"])
        self.value = int(task_spec.get("start", 0))

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        tasks: list[JSONObject] = []
        for i in range(_SIZES[split]):
            rng = seeded_rng("counter", split, i)
            tasks.append({"id": f"{split}-{i}", "start": 0, "target": rng.randint(-5, 20)})
        return tasks

    async def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(
                text=(
                    f"The counter is at {self.value}. Make it equal {self.target} using "
                    "increment (by 1 to 5) and decrement (by 1), then call done."
                ),
                detail=self._state(),
            )
        ]

    def _state(self) -> dict[str, int]:
        return {"value": self.value, "target": self.target}

    def _moved(self) -> ToolOutput:
        return text_output(
            f"The counter is now {self.value}.", metadata=self._state(), detail=self._state()
        )

    @tool
    async def increment(self, params: IncrementInput) -> ToolOutput:
        """Add 1 to 5 (default 1) to the counter."""
        self.value += params.amount
        return self._moved()

    @tool
    async def decrement(self) -> ToolOutput:
        """Subtract 1 from the counter."""
        self.value -= 1
        return self._moved()

    @terminal
    @tool
    async def done(self) -> ToolOutput:
        """Finish: reward 1 if the counter equals the target, else 0; ends the episode."""
        correct = self.value == self.target
        verdict = "Target reached!" if correct else f"Wrong: the target was {self.target}."
        return text_output(
            f"The counter is {self.value}. {verdict}",
            reward=1.0 if correct else 0.0,
            finished=True,
            metadata=self._state(),
        )
