"""Sandbox: small file-and-shell chores in a fresh folder, with the SDK's ``CLIToolset``.

The environment declares ``toolsets = (CLIToolset,)``, so its tools are the
SDK's own ``bash``, ``glob``, ``grep``, ``ls``, ``read``, ``write``, ``edit``,
``multi_edit`` and ``todo_write``, plus this environment's ``submit``. The
toolset acts on ``self.sandbox``, here a :class:`LocalSandbox`: a temporary
folder made at ``setup()`` and removed at ``teardown()``, a subprocess per
command, with a time limit, an output cap and a scrubbed environment.
**It is NOT a security boundary**: commands run as the current user on this
machine (see :mod:`ors_gym.envs._local_sandbox`). Serve it only to agents you
would let run shell commands as you.

Each task puts a few files in the folder and asks for one chore: write a file
with given content, count the lines of a file, find which file holds a word,
or fix a misspelling. ``submit(answer)`` ends the episode with reward 1.0 or
0.0: a task with an ``answer`` compares the submitted text to it (surrounding
whitespace and a leading ``./`` ignored); a task with ``expect_files`` checks
those files' contents in the folder (trailing newlines ignored), and the
submitted text does not matter.

Task specs may set ``time_limit`` (seconds per command) and ``output_limit``
(bytes of output per command); otherwise the class attributes of the same
names apply. A call's own ``timeout`` may shorten the limit, not extend it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from openreward.environments import (
    JSONObject,
    TextBlock,
    ToolOutput,
    tool,
)
from openreward.toolsets import CLIToolset
from pydantic import BaseModel, Field, model_validator

from ors_gym.envs._common import BundledEnvironment, seeded_rng, text_output
from ors_gym.envs._local_sandbox import FileTransferError, LocalSandbox

__all__ = ["KINDS", "Sandbox", "SandboxTask"]

#: The chores, in the order tasks cycle through them.
KINDS = ("write_file", "count_lines", "find_word", "fix_typo")
_SIZES = {"train": 8, "test": 4}

_NAMES = ("ada", "grace", "linus", "barbara", "ken", "margaret", "dennis", "frances")
_WORDS = (
    "river", "stone", "lamp", "window", "garden", "paper", "cloud", "pencil", "bridge",
    "orange", "violin", "market", "ladder", "candle", "forest", "harbor", "meadow", "copper",
)
_NEEDLES = ("marmalade", "quasar", "zeppelin", "kumquat", "gazebo", "obsidian")
#: misspelling -> correct spelling; neither appears among ``_WORDS``.
_TYPOS = {
    "recieve": "receive",
    "seperate": "separate",
    "definately": "definitely",
    "occured": "occurred",
    "wierd": "weird",
    "untill": "until",
}


class SandboxTask(BaseModel, extra="forbid"):
    """A Sandbox task spec (validated when the environment is built)."""

    id: str = "custom"
    kind: str = "custom"
    prompt: str
    files: dict[str, str] = Field(default_factory=dict)
    answer: str | None = None
    expect_files: dict[str, str] | None = None
    time_limit: float | None = Field(default=None, gt=0)
    output_limit: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _gradable(self) -> SandboxTask:
        if self.answer is None and not self.expect_files:
            raise ValueError("a Sandbox task needs an 'answer' or 'expect_files' to grade by")
        return self


class SubmitInput(BaseModel):
    """Input of ``submit``."""

    answer: str = Field(
        default="", description="Your answer; ignored by tasks graded on the folder's files."
    )


class Sandbox(BundledEnvironment):
    """File-and-shell chores in a fresh local folder; ``submit`` grades them.

    The folder is a :class:`LocalSandbox`, which is NOT a security boundary:
    commands run as the current user on this machine.
    """

    toolsets: ClassVar[Sequence[type]] = (CLIToolset,)
    #: Seconds a command may run, unless the task spec sets ``time_limit``.
    time_limit: ClassVar[float] = 10.0
    #: Bytes of output a command may return, unless the task spec sets ``output_limit``.
    output_limit: ClassVar[int] = 16_000

    def _read_task(self, task_spec: JSONObject) -> None:
        self.task = SandboxTask.model_validate(task_spec)
        # Built here (toolsets bind to it at session creation) but started in setup():
        # an instance that never gets a session makes no folder.
        self.sandbox = LocalSandbox(
            self.task.files,
            timeout=self.task.time_limit or self.time_limit,
            max_bytes=self.task.output_limit or self.output_limit,
        )

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        return [_make_task(split, i) for i in range(_SIZES[split])]

    async def setup(self) -> None:
        await self.sandbox.start()

    async def teardown(self) -> None:
        await self.sandbox.stop()

    async def get_prompt(self) -> list[TextBlock]:
        files = ", ".join(sorted(self.task.files)) or "none"
        text = (
            f"{self.task.prompt}\n\nYou work in a fresh folder (the working directory of every "
            f"command; relative paths start there). Files present: {files}. Use bash and the "
            f"file tools, then call submit to be graded; that ends the episode. Each command "
            f"may run {self.sandbox.timeout:g} s and print {self.sandbox.max_bytes} bytes."
        )
        detail = {"kind": self.task.kind, "files": sorted(self.task.files)}
        return [TextBlock(text=text, detail=detail)]

    @tool(exclusive=True)
    async def submit(self, params: SubmitInput) -> ToolOutput:
        """Finish and be graded: reward 1 if the task is done, else 0; ends the episode."""
        problems = await self._problems(params.answer)
        correct = not problems
        text = "Correct!" if correct else "Incorrect: " + "; ".join(problems)
        return text_output(
            text,
            reward=1.0 if correct else 0.0,
            finished=True,
            metadata={"correct": correct, "problems": problems},
        )

    async def _problems(self, answer: str) -> list[str]:
        """What is wrong with the submission (empty: nothing)."""
        problems = []
        if self.task.answer is not None and _normal(answer) != _normal(self.task.answer):
            problems.append(f"the answer {answer.strip()!r} is not the expected one")
        for path, expected in (self.task.expect_files or {}).items():
            try:
                content = (await self.sandbox.download(path)).decode("utf-8", errors="replace")
            except FileTransferError:  # missing, not a file, or too large
                problems.append(f"{path} is missing or not a readable file")
                continue
            if content.rstrip("\n") != expected.rstrip("\n"):
                problems.append(f"{path} does not hold the expected content")
        return problems


def _normal(answer: str) -> str:
    """An answer without surrounding whitespace or a leading ``./``."""
    text = answer.strip()
    return text.removeprefix("./")


def _lines(rng: random.Random, count: int, width: int = 4) -> list[str]:
    """``count`` lines of ``width`` filler words."""
    return [" ".join(rng.choice(_WORDS) for _ in range(width)) for _ in range(count)]


def _make_task(split: str, index: int) -> dict[str, Any]:
    """Task ``index`` of ``split``: the chores cycle through ``KINDS``, details seeded."""
    rng = seeded_rng("sandbox", split, index)
    kind = KINDS[index % len(KINDS)]
    task: dict[str, Any] = {"id": f"{split}-{index}", "kind": kind}
    if kind == "write_file":
        line = f"hello, {rng.choice(_NAMES)} {rng.randint(10, 99)}"
        task["prompt"] = f"Create the file greeting.txt whose only line is: {line}"
        task["files"] = {"README.txt": "Put greeting.txt next to this file.\n"}
        task["expect_files"] = {"greeting.txt": line + "\n"}
    elif kind == "count_lines":
        count = rng.randint(7, 40)
        task["prompt"] = "How many lines does data.txt have? Submit the number."
        task["files"] = {"data.txt": "\n".join(_lines(rng, count)) + "\n"}
        task["answer"] = str(count)
    elif kind == "find_word":
        needle = rng.choice(_NEEDLES)
        names = [f"notes/{c}.txt" for c in "abcde"]
        target = rng.choice(names)
        files = {name: "\n".join(_lines(rng, rng.randint(3, 8))) + "\n" for name in names}
        lines = files[target].splitlines()
        lines.insert(rng.randrange(len(lines) + 1), f"the {needle} is here")
        files[target] = "\n".join(lines) + "\n"
        task["prompt"] = (
            f"Exactly one file under notes/ contains the word {needle!r}. Submit that file's "
            "path relative to the folder (like notes/x.txt)."
        )
        task["files"] = files
        task["answer"] = target
    else:
        wrong, right = rng.choice(sorted(_TYPOS.items()))
        lines = _lines(rng, rng.randint(4, 8), width=5)
        row = rng.randrange(len(lines))
        words = lines[row].split()
        words.insert(rng.randrange(len(words) + 1), "{}")
        lines[row] = " ".join(words)
        template = "\n".join(lines) + "\n"
        task["prompt"] = (
            f"story.txt misspells one word as {wrong!r}. Correct it to {right!r}, change "
            "nothing else, then submit."
        )
        task["files"] = {"story.txt": template.format(wrong)}
        task["expect_files"] = {"story.txt": template.format(right)}
    return task
