"""Judged: short writing tasks scored alone and as a group (``score_group``).

Each task asks for a short text on a topic, about ``target_words`` words long,
mentioning some ``keywords``. ``answer(text)`` is the ``@terminal`` tool
(``arg`` "text"): a harness routes the model's plain reply into it. Its
reward is the text's quality, in [0, 1]::

    quality = 0.7 * keyword coverage + 0.3 * max(0, 1 - |words - target| / target)

(coverage: the share of keywords the text contains, as whole words, any case).

``score_group`` compares a group of attempts at the task, as a pairwise
judge would, but deterministically and offline: each candidate's reward is
its win rate against the others by quality (a tie counts half; a group of
one scores 0.5). The text judged is the candidate's final answer: the
``text`` of its last ``answer`` tool call, else its last assistant turn's
text. Metadata carries the quality, coverage, word count and missing keywords.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from openreward.environments import (
    GroupCandidate,
    GroupScore,
    JSONObject,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from pydantic import BaseModel, Field

from ors_gym.envs._common import BundledEnvironment, text_output

__all__ = ["Judged", "final_answer", "quality"]

COVERAGE_WEIGHT = 0.7
LENGTH_WEIGHT = 0.3

# (kind of text, topic, keywords, target words)
_TRAIN: list[tuple[str, str, tuple[str, ...], int]] = [
    ("product description", "a desk lamp", ("bright", "adjustable", "energy"), 30),
    ("haiku-like note", "autumn rain", ("leaves", "grey", "quiet"), 12),
    ("postcard", "a trip to the seaside", ("waves", "sand", "sunset", "ice cream"), 40),
    ("tip", "keeping houseplants alive", ("water", "light", "drainage"), 25),
    ("announcement", "a library's new opening hours", ("monday", "weekend", "evening"), 30),
    ("recipe summary", "tomato soup", ("tomatoes", "garlic", "simmer", "basil"), 35),
    ("weather report", "a stormy afternoon", ("wind", "thunder", "umbrella"), 25),
    ("thank-you note", "a neighbour who fed the cat", ("grateful", "cat", "weekend"), 25),
    ("review", "a small coffee shop", ("espresso", "cosy", "friendly", "price"), 40),
    ("reminder", "a team meeting", ("tuesday", "agenda", "room"), 20),
    ("slogan", "cycling to work", ("healthy", "fast", "green"), 10),
    ("bio", "a retired sailor", ("ocean", "stories", "storms", "harbour"), 35),
]
_TEST: list[tuple[str, str, tuple[str, ...], int]] = [
    ("product description", "a rain jacket", ("waterproof", "light", "hood"), 30),
    ("postcard", "a mountain hike", ("summit", "trail", "view"), 35),
    ("tip", "sleeping better", ("dark", "routine", "screens"), 25),
    ("review", "a museum", ("paintings", "guide", "crowded"), 35),
]
_SPLITS = {"train": _TRAIN, "test": _TEST}
_WORD = re.compile(r"[\w'-]+")


class AnswerText(BaseModel):
    """Input of the terminal ``answer`` tool."""

    text: str = Field(description="Your finished text.")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _mentions(text: str, keyword: str) -> bool:
    pattern = r"(?<![\w'-])" + r"\s+".join(map(re.escape, keyword.lower().split())) + r"(?![\w'-])"
    return re.search(pattern, text.lower()) is not None


def quality(text: str, keywords: Sequence[str], target_words: int) -> dict[str, Any]:
    """The quality of ``text`` (in [0, 1]) and its parts: coverage, words, missing keywords."""
    missing = [k for k in keywords if not _mentions(text, k)]
    coverage = 1.0 - len(missing) / len(keywords) if keywords else 1.0
    words = len(_words(text))
    closeness = max(0.0, 1.0 - abs(words - target_words) / target_words) if target_words else 1.0
    score = COVERAGE_WEIGHT * coverage + LENGTH_WEIGHT * closeness
    return {
        "quality": round(score, 6),
        "coverage": round(coverage, 6),
        "words": words,
        "target_words": target_words,
        "missing": missing,
    }


def final_answer(messages: Sequence[Any]) -> str:
    """The text a transcript ends on: its last ``answer`` call's text, else the
    last assistant turn's text ("" if none). Messages are ORS messages (SDK
    objects or dicts); a chat dict with string ``content`` works too."""
    for message in reversed(messages):
        if _get(message, "role") != "assistant":
            continue
        if isinstance(_get(message, "content"), str):  # a plain chat message
            return str(_get(message, "content"))
        blocks = list(_get(message, "blocks") or ())
        for block in reversed(blocks):
            if _get(block, "type") == "tool_call" and _get(block, "name") == "answer":
                given = _get(block, "input") or {}
                if isinstance(given, Mapping) and isinstance(given.get("text"), str):
                    return str(given["text"])
        texts = [str(_get(b, "text")) for b in blocks if _get(b, "type") == "text"]
        if texts:
            return "\n".join(texts)
    return ""


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


class Judged(BundledEnvironment):
    """Short writing tasks: ``answer`` grades one text, ``score_group`` ranks a group."""

    def _read_task(self, task_spec: JSONObject) -> None:
        keywords = task_spec.get("keywords")
        target = task_spec.get("target_words")
        if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
            raise ValueError("a Judged task needs 'keywords', a list of strings")
        if not isinstance(target, int) or target < 1:
            raise ValueError("a Judged task needs 'target_words', a positive integer")
        self.kind = str(task_spec.get("kind", "text"))
        self.topic = str(task_spec.get("topic", "anything"))
        self.keywords = list(keywords)
        self.target_words = target

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        return [
            {
                "id": f"{split}-{i}",
                "kind": kind,
                "topic": topic,
                "keywords": list(keywords),
                "target_words": target,
            }
            for i, (kind, topic, keywords, target) in enumerate(_SPLITS[split])
        ]

    async def get_prompt(self) -> list[TextBlock]:
        text = (
            f"Write a short {self.kind} about {self.topic}, about {self.target_words} words "
            f"long. Mention: {', '.join(self.keywords)}. Reply with the text only."
        )
        return [
            TextBlock(
                text=text,
                detail={"keywords": list(self.keywords), "target_words": self.target_words},
            )
        ]

    @terminal
    @tool
    async def answer(self, params: AnswerText) -> ToolOutput:
        """Submit your text: reward is its quality (keywords covered, length); ends the episode."""
        graded = quality(params.text, self.keywords, self.target_words)
        missing = ", ".join(graded["missing"]) or "none"
        return text_output(
            f"Quality {graded['quality']:.2f}: {graded['words']} words "
            f"(target {self.target_words}), missing keywords: {missing}.",
            reward=graded["quality"],
            finished=True,
            metadata=graded,
        )

    async def score_group(self, candidates: Sequence[GroupCandidate]) -> Sequence[GroupScore]:
        graded = [
            quality(final_answer(c.messages), self.keywords, self.target_words)
            for c in candidates
        ]
        scores = []
        for i, mine in enumerate(graded):
            others = [g["quality"] for j, g in enumerate(graded) if j != i]
            wins = sum(1.0 if mine["quality"] > q else 0.5 if mine["quality"] == q else 0.0
                       for q in others)
            reward = wins / len(others) if others else 0.5
            scores.append(GroupScore(reward=reward, metadata={**mine, "win_rate": reward}))
        return scores
