"""Math: arithmetic questions generated from the task index (an index-only environment).

Tasks are not stored: ``get_task(split, i)`` derives task ``i`` from a random
stream seeded with ``(split, i)``, so ``list_tasks`` is not supported and the
server's ``/tasks`` answers 400 while ``/num_tasks``, ``/task`` and
``/task_range`` work. One call to ``submit`` ends the episode: reward 1.0 for
an answer within 1e-6 of the truth, else 0.0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from openreward.environments import (
    JSONObject,
    TextBlock,
    ToolOutput,
    tool,
)
from pydantic import BaseModel, Field

from ors_gym.envs._common import BundledEnvironment, seeded_rng, text_output

__all__ = ["Math"]

_SIZES = {"train": 1000, "test": 200}
_TOLERANCE = 1e-6
_NAMES = ("Ada", "Ben", "Chloe", "Dev", "Elif", "Femi", "Gus", "Hana")
_ITEMS = ("apples", "marbles", "stickers", "coins", "books", "shells")


class SubmitAnswer(BaseModel):
    """Input of ``submit``."""

    answer: float = Field(description="Your final numeric answer.")


def _make_task(split: str, index: int) -> dict[str, object]:
    """Task ``index`` of ``split``: same inputs, same question, in any process."""
    rng = seeded_rng("math", split, index)
    kind = rng.choice(("add", "sub", "mul", "div", "word_add", "word_sub", "word_mul"))
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    if kind == "add":
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        question, answer = f"What is {a} + {b}?", a + b
    elif kind == "sub":
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        question, answer = f"What is {a} - {b}?", a - b
    elif kind == "mul":
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        question, answer = f"What is {a} * {b}?", a * b
    elif kind == "div":
        b, answer = rng.randint(2, 12), rng.randint(2, 12)
        question = f"What is {answer * b} / {b}?"
    elif kind == "word_add":
        a, b = rng.randint(2, 50), rng.randint(2, 50)
        question = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"
        answer = a + b
    elif kind == "word_sub":
        a = rng.randint(10, 60)
        b = rng.randint(1, a)
        question = f"{name} has {a} {item} and gives away {b}. How many {item} are left?"
        answer = a - b
    else:
        a, b = rng.randint(2, 9), rng.randint(2, 12)
        question = f"{name} has {a} bags with {b} {item} in each. How many {item} in total?"
        answer = a * b
    return {"id": f"{split}-{index}", "question": question, "answer": answer, "kind": kind}


class Math(BundledEnvironment):
    """Arithmetic questions answered through ``submit`` (reward 1 if correct, else 0)."""

    def _read_task(self, task_spec: JSONObject) -> None:
        if "question" not in task_spec or "answer" not in task_spec:
            raise ValueError("a Math task needs 'question' and 'answer' fields")
        self.question = str(task_spec["question"])
        self.answer = float(task_spec["answer"])

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        raise NotImplementedError(
            "Math is index-only: use num_tasks(split) and get_task(split, index)"
        )

    @classmethod
    async def num_tasks(cls, split: str) -> int:
        cls._check_split(split)
        return _SIZES[split]

    @classmethod
    async def get_task(cls, split: str, index: int) -> JSONObject:
        """Task ``index`` of ``split``; negative indexes count from the end."""
        total = await cls.num_tasks(split)
        if index < 0:
            index += total
        if not 0 <= index < total:
            raise IndexError(
                f"Math split {split!r} has {total} tasks; index {index} is out of range"
            )
        return _make_task(split, index)

    async def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(text=f"{self.question}\nGive your answer as a number with the submit tool.")
        ]

    @tool
    async def submit(self, params: SubmitAnswer) -> ToolOutput:
        """Submit your numeric answer; this ends the episode (reward 1 if correct, else 0)."""
        given = params.answer
        correct = math.isfinite(given) and abs(given - self.answer) <= _TOLERANCE
        shown = int(self.answer) if self.answer.is_integer() else self.answer
        text = (
            "Correct!" if correct else f"Incorrect: you answered {given:g}, the answer is {shown}."
        )
        return text_output(
            text,
            reward=1.0 if correct else 0.0,
            finished=True,
            metadata={"correct": correct, "expected": self.answer},
        )
