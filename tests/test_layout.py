"""The package's layout: no import circles, the record format apart, docs free of drift.

Import circles are found as the project's import-cycle tool finds them: every
``import`` and ``from ... import`` statement of a module, at its top or inside a
function, is an edge to the package module it names (the implicit import of a
parent package is not); a strongly connected group of two or more modules is a
circle.

Docstrings and comments must not carry what goes stale or means nothing to a
reader elsewhere: machine paths, issue numbers, CPU shares and timings.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ors_gym"


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _edges(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif module in known:
                    found.add(module)
    found.discard(name)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = []
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work.append((start, iter(sorted(graph[start]))))
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules(PACKAGE)
    return {name: _edges(name, path, known) for name, path in known.items()}


def test_the_circle_finder_finds_a_circle_through_an_import_inside_a_function() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circle() -> None:
    circles = _circles(_graph())
    assert circles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_record_format_and_the_viewer_import_no_wrapper() -> None:
    graph = _graph()
    apart = ["ors_gym.trajectories"] + [n for n in graph if n.startswith("ors_gym.viewer")]
    for name in apart:
        wrappers = sorted(e for e in graph[name] if e.startswith("ors_gym.wrappers"))
        assert wrappers == [], f"{name} imports {wrappers}"


def test_the_backends_and_the_envs_import_no_app() -> None:
    graph = _graph()
    apps = ("ors_gym.serving", "ors_gym.cli", "ors_gym.eval", "ors_gym.train")
    core = [n for n in graph if n.startswith(("ors_gym.backends", "ors_gym.envs"))]
    core += ["ors_gym.env", "ors_gym.async_env", "ors_gym.settings", "ors_gym.registration"]
    for name in core:
        used = sorted(e for e in graph[name] if e.startswith(apps))
        assert used == [], f"{name} imports {used}"


# -- docs that match the code -------------------------------------------------------------

#: What goes stale or points nowhere for a reader of the code elsewhere.
DRIFT = {
    "a machine path": re.compile(r"(?<![\w.:/])/(?:work|tmp|home|Users|root|mnt)/"),
    "an issue number": re.compile(r"\bissues? ?#?\d+", re.IGNORECASE),
    "a CPU share": re.compile(
        r"\d[\d.]* ?% of\b|\b(?:a|one) (?:tenth|fifth|quarter|third|half) of the [\w']+ CPU",
        re.IGNORECASE,
    ),
    "a timing on this machine": re.compile(
        r"\babout (?:a|one|[\d.,]+) ?(?:minutes?|seconds?|ms|s)\b[^.]{0,40}\bcores?\b"
        r"|\b[\d.]+ ?ms of CPU\b|\bdownloaded here\b",
        re.IGNORECASE,
    ),
}

#: Files other engineers are changing now, with the drift they still carry: to be emptied
#: as those files are cleaned, never added to.
PENDING: dict[str, set[str]] = {}


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every docstring and comment in the Python file ``path``."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield body[0].lineno, body[0].value.value
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):  # attribute docstrings (#: too, below)
            yield node.lineno, node.value.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _drift(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line, text in _prose(path):
        for what, pattern in DRIFT.items():
            match = pattern.search(text)
            if match:
                found.setdefault(what, []).append(f"line {line}: {match.group(0)!r}")
    return found


def _files() -> list[Path]:
    return sorted(
        p for folder in ("ors_gym", "benchmarks", "tests") for p in (ROOT / folder).rglob("*.py")
    )


def test_the_drift_patterns_catch_what_they_name() -> None:
    catches = {
        "a machine path": "Wire details: /work/shared/ors-protocol.md.",
        "an issue number": "Targets (issue 15), for OrsVectorEnv",
        "a CPU share": "about 6% of the client's CPU per step",
        "a timing on this machine": "solved in about a minute on 2 CPU cores",
    }
    for what, text in catches.items():
        assert DRIFT[what].search(text), what
    clean = "a report at ``out/report.html``; see https://example.org/issues/140 and 50% off"
    assert not any(p.search(clean) for p in DRIFT.values())


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docstrings_and_comments_carry_no_drift(path: Path) -> None:
    if path == Path(__file__).resolve():
        return  # this file names the patterns it looks for
    relative = path.relative_to(ROOT).as_posix()
    found = {k: v for k, v in _drift(path).items() if k not in PENDING.get(relative, set())}
    assert found == {}, f"{relative}: {found}"


def test_tests_mirror_the_package() -> None:
    """Every folder of tests/ (but its own helpers' caches) is a folder of the package."""
    tests = ROOT / "tests"
    folders = {
        path.relative_to(tests) for path in tests.rglob("*")
        if path.is_dir() and path.name != "__pycache__" and any(path.glob("test_*.py"))
    }
    assert folders, "tests/ has no sub-folders"
    strays = sorted(str(f) for f in folders if not (PACKAGE / f).is_dir())
    assert strays == [], f"test folders with no package folder of the same path: {strays}"


def test_no_package_imports_another_packages_private_module() -> None:
    """A package's private modules are its own (``ors_gym._x`` modules serve every package)."""
    found = set()
    for name, targets in _graph().items():
        for target in targets:
            parts, mine = target.split("."), name.split(".")
            private = any(p.startswith("_") for p in parts[2:])
            if private and len(mine) > 1 and mine[1] != parts[1]:
                found.add((name, target))
    assert not found, (
        "imports of another package's private module (export the name from that package): "
        + "; ".join(f"{a} -> {b}" for a, b in sorted(found)))
