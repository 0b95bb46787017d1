"""The Python snippets of a Markdown page, in order, with their skip marks.

A fenced block opened with ```` ```python ```` is a snippet. An HTML comment
``<!-- skip: reason -->`` on the line before its fence (blank lines between are
allowed) marks it as one that cannot run in the test suite (a hosted platform,
a GPU, a feature not merged yet); the tests still compile it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEMO_URL", "Snippet", "doc_pages", "snippets"]

ROOT = Path(__file__).resolve().parent.parent

#: The server address the pages' snippets use; the tests put a live server's URL in its place.
DEMO_URL = "http://127.0.0.1:8080"

_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_SKIP = re.compile(r"^\s*<!--\s*skip:\s*(.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    """One fenced Python block: where it starts, its code, and why it is skipped (if it is)."""

    path: Path
    line: int
    code: str
    skip: str | None


def doc_pages() -> list[Path]:
    """README.md and every Markdown page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def snippets(path: Path) -> list[Snippet]:
    """The Python snippets of the page at ``path``, in page order."""
    found: list[Snippet] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    skip: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        mark = _SKIP.match(line)
        fence = _FENCE.match(line)
        if mark:
            skip = mark.group(1)
        elif fence:
            indent, lang = fence.groups()
            start = i + 1
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                i += 1
            if lang in ("python", "py"):
                body = [ln[len(indent):] for ln in lines[start:i]]
                found.append(Snippet(path, start + 1, "\n".join(body) + "\n", skip))
            skip = None
        elif line.strip():
            skip = None
        i += 1
    return found
