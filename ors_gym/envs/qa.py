"""QA: short factual questions, answered in plain text through a terminal tool.

``answer`` is the environment's ``@terminal`` tool (``arg`` "answer"): a
harness routes the model's plain reply into it. The reply is compared with the
reference answer (and its accepted aliases) after normalisation: lower case,
punctuation and the articles a/an/the removed, whitespace collapsed. Reward 1.0
on a match, else 0.0; either way the episode ends. ``hint`` reveals the first
letter of the answer (reward 0, episode continues).
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

from openreward.environments import (
    JSONObject,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from pydantic import BaseModel, Field

from ors_gym.envs._common import BundledEnvironment, text_output

__all__ = ["QA", "normalise_answer"]

# (question, answer, other accepted answers)
_TRAIN: list[tuple[str, str, tuple[str, ...]]] = [
    ("What is the capital of France?", "Paris", ()),
    ("What is the capital of Japan?", "Tokyo", ()),
    ("What is the capital of Italy?", "Rome", ()),
    ("What is the capital of Canada?", "Ottawa", ()),
    ("What is the capital of Australia?", "Canberra", ()),
    ("What is the chemical symbol for gold?", "Au", ()),
    ("What is the chemical symbol for sodium?", "Na", ()),
    ("What planet is known as the Red Planet?", "Mars", ()),
    ("What is the largest planet in the Solar System?", "Jupiter", ()),
    ("How many legs does a spider have?", "8", ("eight",)),
    ("How many continents are there on Earth?", "7", ("seven",)),
    ("What gas do plants absorb from the air for photosynthesis?", "carbon dioxide", ("CO2",)),
    ("What is the freezing point of water in degrees Celsius?", "0", ("zero",)),
    ("Who wrote 'Romeo and Juliet'?", "William Shakespeare", ("Shakespeare",)),
    ("What is the longest river in South America?", "Amazon", ("Amazon River",)),
    ("Which element has atomic number 1?", "Hydrogen", ("H",)),
    ("What is the square root of 81?", "9", ("nine",)),
    ("In which ocean are the Hawaiian Islands?", "Pacific", ("Pacific Ocean",)),
    ("What is the hardest natural substance?", "Diamond", ()),
    ("Which language has the most native speakers?", "Mandarin Chinese", ("Mandarin",)),
]
_TEST: list[tuple[str, str, tuple[str, ...]]] = [
    ("What is the capital of Germany?", "Berlin", ()),
    ("What is the capital of Kenya?", "Nairobi", ()),
    ("What is the chemical symbol for iron?", "Fe", ()),
    ("Which planet is closest to the Sun?", "Mercury", ()),
    ("How many sides does a hexagon have?", "6", ("six",)),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci", ("da Vinci", "Leonardo")),
    ("What is the boiling point of water at sea level in degrees Celsius?", "100", ()),
    ("What is the largest ocean on Earth?", "Pacific", ("Pacific Ocean",)),
    ("What is the smallest prime number?", "2", ("two",)),
    ("Which gas makes up most of Earth's atmosphere?", "Nitrogen", ("N2",)),
]
_SPLITS: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {"train": _TRAIN, "test": _TEST}

_PUNCT = str.maketrans(dict.fromkeys(string.punctuation, " "))
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalise_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace."""
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCT))
    return " ".join(text.split())


class AnswerInput(BaseModel):
    """Input of the terminal ``answer`` tool."""

    answer: str = Field(description="Your answer, as short as possible (a word or a name).")


class QA(BundledEnvironment):
    """Factual questions graded by normalised exact match (terminal tool ``answer``)."""

    def _read_task(self, task_spec: JSONObject) -> None:
        if "question" not in task_spec or "answer" not in task_spec:
            raise ValueError("a QA task needs 'question' and 'answer' fields")
        self.question = str(task_spec["question"])
        self.answer_text = str(task_spec["answer"])
        aliases = task_spec.get("aliases") or []
        self.accepted = {normalise_answer(self.answer_text)} | {
            normalise_answer(str(a)) for a in aliases
        }

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        return [
            {"id": f"{split}-{i}", "question": q, "answer": a, "aliases": list(aliases)}
            for i, (q, a, aliases) in enumerate(_SPLITS[split])
        ]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"{self.question}\nReply with just the answer (a word or a name).")]

    @tool
    async def hint(self) -> ToolOutput:
        """Reveal the first letter of the answer (no reward; the episode continues)."""
        return text_output(f"The answer starts with {self.answer_text[0]!r}.", reward=0.0)

    @terminal
    @tool
    async def answer(self, params: AnswerInput) -> ToolOutput:
        """Grade a final answer: reward 1 for a normalised exact match, else 0; ends the episode."""
        correct = normalise_answer(params.answer) in self.accepted
        text = "Correct!" if correct else f"Incorrect: the answer is {self.answer_text}."
        return text_output(
            text, reward=1.0 if correct else 0.0, finished=True, metadata={"correct": correct}
        )
