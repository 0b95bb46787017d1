"""The Python snippets and runnable commands of a Markdown page, in order, with their marks.

A fenced block opened with ```` ```python ```` is a snippet. An HTML comment
``<!-- skip: reason -->`` on the line before its fence (blank lines between are
allowed) marks it as one that cannot run in the test suite (a hosted platform,
a GPU); the tests still compile it. A ```` ```bash ```` block marked
``<!-- run -->`` holds ``ors-gym`` commands the tests run in-process, one a line; every
other ``ors-gym`` line of a bash block (one that needs a GPU, a model endpoint or a
package the reader writes) is parsed by the command's own parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEMO_URL", "MODEL_URL", "Snippet", "command_lines", "commands", "doc_pages", "snippets"]

ROOT = Path(__file__).resolve().parent.parent

#: The server address the pages' snippets use; the tests put a live server's URL in its place.
DEMO_URL = "http://127.0.0.1:8080"
#: The OpenAI-compatible endpoint the pages use; the tests put the suite's own
#: (``tests/_openai_server.py``) in its place.
MODEL_URL = "http://127.0.0.1:8000/v1"

_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_MARK = re.compile(r"^\s*<!--\s*(skip:\s*(.+?)|run)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    """One fenced block: where it starts, its code, and why it is skipped (if it is)."""

    path: Path
    line: int
    code: str
    skip: str | None


def doc_pages() -> list[Path]:
    """README.md and every Markdown page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _blocks(path: Path) -> list[tuple[str, str | None, Snippet]]:
    """Every fenced block of the page: its language, the mark before it, the block."""
    found: list[tuple[str, str | None, Snippet]] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    mark: str | None = None
    skip: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        marked = _MARK.match(line)
        fence = _FENCE.match(line)
        if marked:
            mark, skip = ("skip", marked.group(2)) if marked.group(2) else ("run", None)
        elif fence:
            indent, lang = fence.groups()
            start = i + 1
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                i += 1
            body = [ln[len(indent):] for ln in lines[start:i]]
            found.append((lang, mark, Snippet(path, start + 1, "\n".join(body) + "\n", skip)))
            mark = skip = None
        elif line.strip():
            mark = skip = None
        i += 1
    return found


def snippets(path: Path) -> list[Snippet]:
    """The Python snippets of the page at ``path``, in page order."""
    return [block for lang, _, block in _blocks(path) if lang in ("python", "py")]


def commands(path: Path) -> list[tuple[int, str]]:
    """The ``ors-gym`` command lines of the page's ``<!-- run -->`` bash blocks, with
    their line numbers (trailing ``# comments`` dropped)."""
    found: list[tuple[int, str]] = []
    for lang, mark, block in _blocks(path):
        if lang != "bash" or mark != "run":
            continue
        for offset, line in enumerate(block.code.splitlines()):
            command = line.split(" #")[0].strip()
            if command:
                if not command.startswith("ors-gym "):
                    raise ValueError(f"{path}:{block.line + offset}: not an ors-gym command")
                found.append((block.line + offset, command))
    return found


def command_lines(path: Path) -> list[tuple[int, str]]:
    """Every ``ors-gym`` command line of the page's bash blocks, marked or not, with its line
    number: ``\\`` continuations joined, trailing ``# comments`` dropped."""
    found: list[tuple[int, str]] = []
    for lang, _, block in _blocks(path):
        if lang not in ("bash", "sh", "shell", "console"):
            continue
        start, pending = 0, ""
        for offset, line in enumerate(block.code.splitlines()):
            text = line.split(" #")[0].strip()
            if not pending:
                start = offset
            if text.endswith("\\"):
                pending += text[:-1].strip() + " "
                continue
            command, pending = (pending + text).strip(), ""
            if command.startswith("ors-gym ") or command == "ors-gym":
                found.append((block.line + start, command))
    return found
