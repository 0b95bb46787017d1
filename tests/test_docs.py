"""The documentation is tested like code: every snippet runs, and the site builds clean.

Each page's Python snippets run in page order in one namespace (a page's snippets
build on each other), in a fresh working folder, with the bundled environments served
by the session's real ORS server in place of the pages' ``http://127.0.0.1:8080`` and the
suite's OpenAI-compatible server in place of their ``http://127.0.0.1:8000/v1``.
Snippets marked ``<!-- skip: reason -->`` are compiled only; ``ors-gym`` commands in
bash blocks marked ``<!-- run -->`` run in-process, in page order with the snippets. A deprecated
ors_gym import path in a snippet is an error. Every other ``ors-gym`` command line in a
bash block is parsed by the command's own parser. The site is built with the README's
command, ``mkdocs build --strict``, and every ``WARNING`` line it prints (a broken link, a
docstring that fails to render, an option with no description) fails the test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._docs_snippets import (
    DEMO_URL,
    MODEL_URL,
    ROOT,
    command_lines,
    commands,
    doc_pages,
    snippets,
)

PAGES = doc_pages()


@pytest.fixture
def _openai_endpoint() -> Iterator[str]:
    """The suite's OpenAI-compatible server (``ScriptedLLM`` behind real HTTP), for a page."""
    from tests._openai_server import OpenAIServer

    with OpenAIServer() as srv:
        yield srv.base_url


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_snippets_run(
    page: Path, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ors_gym.cli import main

    found = snippets(page)
    lines = commands(page)
    # The session's server starts only for a page that talks to one.
    uses_server = any(DEMO_URL in s.code for s in found) or any(DEMO_URL in c for _, c in lines)
    url = str(request.getfixturevalue("server_url")) if uses_server else DEMO_URL
    steps = sorted([(s.line, s) for s in found] + lines, key=lambda item: item[0])
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    model_url = MODEL_URL
    if any(MODEL_URL in s.code for s in found) or any(MODEL_URL in c for _, c in lines):
        model_url = str(request.getfixturevalue("_openai_endpoint"))

    def here(text: str) -> str:
        return text.replace(DEMO_URL, url).replace(MODEL_URL, model_url)

    try:
        with warnings.catch_warnings():
            # A page teaching an import path ors_gym has deprecated fails here.
            warnings.filterwarnings("error", message=r"ors_gym\.", category=DeprecationWarning)
            for line, step in steps:
                where = f"{page.relative_to(ROOT)}:{line}"
                if isinstance(step, str):
                    argv = shlex.split(here(step))[1:]
                    assert main(argv) == 0, f"{where}: {step} failed"
                    continue
                code = compile(here(step.code), where, "exec")
                if step.skip is None:
                    exec(code, namespace)
    finally:
        for value in list(namespace.values()):
            close = getattr(value, "close", None)
            if callable(close) and type(value).__module__.startswith(("ors_gym", "gymnasium")):
                close()
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():  # a page that failed before its shutdown
            ray.shutdown()


def test_skips_give_a_reason() -> None:
    for page in PAGES:
        for snippet in snippets(page):
            assert snippet.skip is None or len(snippet.skip) > 3, (page, snippet.line)


def test_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 160
    assert "bash scripts/train.sh" in text and "bash scripts/test.sh" in text


def _reasons_in_code() -> set[str]:
    """Every literal the code puts in an ``error_reason``, ``truncation_reason`` or
    ``termination_reason``."""
    import ors_gym.protocol
    import ors_gym.turn

    found: set[str] = set()
    key = r'"(?:error|truncation|termination)_reason"'
    for path in (ROOT / "ors_gym").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        found |= set(re.findall(key + r'\]?\s*[:=]\s*"(\w+)"', text))
        found |= set(re.findall(key + r'\s*(?:if [^\n]*)?\)\s*=\s*\(\s*"(\w+)"', text))
        found |= set(re.findall(r'"error_reason":\s*\w+\.reason or "(\w+)"', text))
        found |= set(re.findall(r'setdefault\(\s*"error_reason",\s*"(\w+)"', text))
    doc = ors_gym.protocol.RunToolError.__doc__ or ""
    found |= set(re.findall(r"``(\w+)``", doc.partition("one of")[2]))
    source = Path(ors_gym.turn.__file__).read_text(encoding="utf-8")
    body = source.partition("def truncation_reason")[2].partition("\ndef ")[0]
    found |= set(re.findall(r'return "(\w+)"', body))
    return found


def test_every_reason_is_documented() -> None:
    page = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(\w+)` \|", page, re.MULTILINE))
    in_code = _reasons_in_code()
    assert {"max_steps", "not_found", "session_lost", "no_tool_call"} <= in_code  # the scan works
    assert in_code - documented == set(), "reasons the code sets but the errors page omits"
    assert documented - in_code == set(), "reasons the errors page lists but the code never sets"


def _lower_priority() -> None:
    os.nice(10)


#: The site build, as the README gives it (the suite adds only ``-d`` for a temporary folder).
SITE_BUILD = ("mkdocs", "build", "--strict")


class _SiteBuild:
    """``mkdocs build --strict`` in a child process, started early so that it overlaps
    the snippet tests (which mostly wait on servers and Ray) instead of following them.
    It runs at a lower priority, so it takes the CPU those tests leave idle."""

    def __init__(self, site: Path) -> None:
        self.site = site
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", *SITE_BUILD, "-d", str(site)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            preexec_fn=_lower_priority if hasattr(os, "nice") else None,
        )

    def result(self) -> tuple[int, str]:
        """The build's exit code and output, once it has finished."""
        output, _ = self.process.communicate(timeout=240)
        return self.process.returncode, output

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


@pytest.fixture(scope="module", autouse=True)
def site_build(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_SiteBuild | None]:
    """The site build, started with the module's first test when the build test is selected."""
    if not any(item.name == "test_site_builds_strict" for item in request.session.items):
        yield None
        return
    build = _SiteBuild(tmp_path_factory.mktemp("docs") / "site")
    try:
        yield build
    finally:
        build.stop()


def test_site_builds_strict(site_build: _SiteBuild | None) -> None:
    if not (ROOT / "docs" / "guides" / "trainers.md").exists():
        pytest.fail("docs/guides/trainers.md (the trainers guide, in the nav) is missing")
    assert site_build is not None
    returncode, output = site_build.result()
    warned = [line for line in output.splitlines() if line.startswith("WARNING")]
    assert warned == [], "\n".join(warned)
    assert returncode == 0, output
    tmp_path = site_build.site.parent
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    import ors_gym

    missing = [n for n in ors_gym.__all__ if n != "__version__" and f'id="ors_gym.{n}"' not in api]
    assert missing == [], f"public names missing from the API reference: {missing}"
    for page in ("reference/options", "reference/cli", "guides/basics", "architecture"):
        assert (tmp_path / "site" / page / "index.html").exists()


def test_the_options_page_lists_each_option_once() -> None:
    import dataclasses
    import sys

    from ors_gym import EnvSettings
    from ors_gym.backends.http import HttpOptions

    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from _hooks import options_markdown
    finally:
        sys.path.remove(str(ROOT / "docs"))
    page = options_markdown()
    headings = re.findall(r"^### `(\w+)`$", page, re.MULTILINE)
    expected = [f.name for f in dataclasses.fields(EnvSettings) if f.name != "http"]
    expected += [f.name for f in dataclasses.fields(HttpOptions)]
    assert headings == expected  # each option once, none missing
    assert "None" not in re.findall(r"`\w+`\n\nType [^\n]+\n\n(\w+)", page)


def _table_fields(section: str) -> set[str]:
    """The backquoted names in the first column of a Markdown table."""
    names: set[str] = set()
    for cell in re.findall(r"^\| ([^|]+) \|", section, re.MULTILINE):
        names |= set(re.findall(r"`(\w+)`", cell))
    return names


def test_trajectory_fields_are_documented(tmp_path: Path) -> None:
    import gymnasium as gym

    from ors_gym.trajectories import read_trajectories
    from ors_gym.wrappers import RecordTrajectories

    env = RecordTrajectories(gym.make("ors/Math-v0"), tmp_path / "t.jsonl")
    env.reset(seed=0)
    env.step({"tool_calls": [{"name": "submit", "arguments": {"answer": 1}}]})
    env.close()
    [record] = read_trajectories(tmp_path / "t.jsonl")
    page = (ROOT / "docs" / "reference" / "trajectories.md").read_text(encoding="utf-8")
    episode, _, rest = page.partition("## A step")
    step, _, result = rest.partition("## A call's result")
    assert set(record) - _table_fields(episode) == set()
    assert set(record["steps"][0]) - _table_fields(step) == set()
    assert set(record["steps"][0]["results"][0]) - _table_fields(result) == set()


def test_eval_summary_fields_are_documented(tmp_path: Path) -> None:
    from ors_gym.eval import evaluate

    summary = evaluate("ors/Counter-v0", "scripted", episodes=1, out=tmp_path)
    page = (ROOT / "docs" / "reference" / "eval-summary.md").read_text(encoding="utf-8")
    documented = _table_fields(page)
    assert set(summary) - documented == set(), "summary.json fields the page omits"
    assert documented - set(summary) == set(), "fields the page lists but summary.json lacks"


def _viewer_png() -> Any:
    """``scripts/viewer_png.py`` as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("viewer_png", ROOT / "scripts" / "viewer_png.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_viewer_png_comes_from_a_real_run(tmp_path: Path) -> None:
    """The picture's page: a real scripted evaluation, its interval within the rewards seen."""
    from ors_gym.trajectories import read_trajectories

    page = _viewer_png().make_report(tmp_path).read_text(encoding="utf-8")
    records = read_trajectories(tmp_path / "scripted-eval.jsonl")
    rewards = [r["total_reward"] for r in records]
    table = page.partition('id="summary">')[2].partition("</table>")[0]
    low, high = map(float, re.findall(r"95% CI (-?[\d.]+) \.\. (-?[\d.]+)", table)[0])
    assert min(rewards) <= low <= high <= max(rewards)
    assert "ors/GridWorld-v0, ors/QA-v0" in table
    guide = (ROOT / "docs" / "guides" / "llm-agents.md").read_text(encoding="utf-8")
    assert "python scripts/viewer_png.py" in guide and "(../viewer.png)" in guide


@pytest.mark.slow
def test_viewer_png_script_writes_the_picture(tmp_path: Path) -> None:
    from tests._browser import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("chromium is not installed")
    module = _viewer_png()
    png = tmp_path / "viewer.png"
    assert module.main([str(png)]) == 0
    from PIL import Image

    with Image.open(png) as image:
        assert image.size == module.WINDOW
        assert len(image.convert("L").getcolors(256) or []) > 20  # a page, not a blank frame


def test_collector_reads_fences_and_skip_marks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n<!-- skip: needs a GPU -->\n\n```python\nx = 1\n```\n\n"
        "<!-- skip: stale -->\nA paragraph cancels the mark.\n```python\ny = 2\n```\n"
        "```bash\nls\n```\n- item\n\n    ```python\n    z = 3\n    ```\n",
        encoding="utf-8",
    )
    found = snippets(page)
    assert [(s.code, s.skip) for s in found] == [
        ("x = 1\n", "needs a GPU"), ("y = 2\n", None), ("z = 3\n", None),
    ]
    assert found[0].line == 6


def test_collector_reads_run_marks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- run -->\n```bash\nors-gym list   # every id\n\nors-gym eval x\n```\n"
        "```bash\nors-gym serve\n```\n<!-- run -->\n```bash\nls\n```\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="not an ors-gym command"):
        commands(page)
    page.write_text(page.read_text(encoding="utf-8").replace("ls", "ors-gym view f"), "utf-8")
    assert commands(page) == [(3, "ors-gym list"), (5, "ors-gym eval x"), (12, "ors-gym view f")]
    assert len(commands(ROOT / "docs" / "guides" / "llm-agents.md")) >= 1


def test_readme_builds_the_site_as_the_suite_does() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert " ".join(SITE_BUILD) in text


def test_command_lines_parse() -> None:
    """Every ``ors-gym`` line of a bash block (run or not) is one the command accepts."""
    from ors_gym.cli import build_parser

    parser = build_parser()
    checked = 0
    for page in PAGES:
        for line, command in command_lines(page):
            where = f"{page.relative_to(ROOT)}:{line}"
            try:
                parser.parse_args(shlex.split(command)[1:])
            except SystemExit as exc:
                pytest.fail(f"{where}: the ors-gym parser refuses {command!r} (exit {exc.code})")
            checked += 1
    assert checked >= 10  # the collector finds the guides' command lines


def test_collector_reads_command_lines(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\npip install x\nors-gym serve a:B \\\n  --port 1   # note\n```\n"
        "Text `ors-gym list` inline.\n<!-- run -->\n```bash\nors-gym list\n```\n",
        encoding="utf-8",
    )
    assert command_lines(page) == [(3, "ors-gym serve a:B --port 1"), (9, "ors-gym list")]


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links into the docs"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert missing == [], f"README links to files that do not exist: {missing}"


_TREE_LINE = re.compile(r"^((?:│   |    )*)(?:├── |└── )?([\w.]+/?)(?:\s{2,}.*)?$")


def _architecture_tree(page: str) -> set[str]:
    """The paths the architecture page's layout tree names, relative to the repository."""
    block = page.partition("## Layout")[2].partition("```text\n")[2].partition("```")[0]
    lines = block.splitlines()
    assert lines and lines[0] == "ors_gym/", "the layout tree starts at ors_gym/"
    stack: list[str] = ["ors_gym"]
    named: set[str] = set()
    for line in lines[1:]:
        match = _TREE_LINE.match(line)
        assert match, f"a layout line the test cannot read: {line!r}"
        depth = len(match.group(1)) // 4 + 1
        name = match.group(2)
        del stack[depth:]
        path = "/".join([*stack, name.rstrip("/")])
        named.add(path)
        if name.endswith("/"):
            stack.append(name.rstrip("/"))
    return named


def _package_tree(root: Path) -> set[str]:
    """Every package and every module (``__init__`` aside) under ``root/ors_gym``."""
    found: set[str] = set()
    for path in (root / "ors_gym").rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root).as_posix()
        if path.name == "__init__.py":
            if path.parent != root / "ors_gym":
                found.add(path.parent.relative_to(root).as_posix())
        else:
            found.add(rel)
    return found


def test_architecture_layout_matches_the_package() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = _architecture_tree(page)
    assert "ors_gym/backends/http/async_.py" in named  # the parser follows the nesting
    missing = sorted(_package_tree(ROOT) - named)
    assert missing == [], f"modules or packages docs/architecture.md's layout omits: {missing}"
    stale = sorted(p for p in named if not (ROOT / p).exists())
    assert stale == [], f"paths docs/architecture.md's layout names that do not exist: {stale}"
