"""Every library ``ors_gym`` imports is declared in ``pyproject.toml``.

The imports are read from the source (inside functions too), mapped to the
distributions that provide them, and looked up in the dependencies and extras;
the HTTP backends, which every install uses, must need only the dependencies.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ors_gym"


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _declared() -> tuple[set[str], set[str]]:
    """The distributions in ``dependencies``, and those in any extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = {_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    return core, extras


def _imports(folder: Path) -> dict[str, set[str]]:
    """Top-level modules outside the standard library imported under ``folder``, with
    the files importing each."""
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "ors_gym":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


@functools.cache
def _providers() -> dict[str, list[str]]:
    """Top-level module -> installed distributions (a scan of every installed one: once)."""
    return packages_distributions()


#: Modules of extras that cannot be installed beside the suite's (the verifiers extra lives in a
#: venv of its own), with the distribution each comes from.
_ELSEWHERE = {"verifiers": "verifiers", "mcp": "mcp"}


def _distributions(module: str) -> set[str]:
    providers = _providers().get(module)
    if not providers and module in _ELSEWHERE:
        return {_name(_ELSEWHERE[module])}
    if not providers:
        pytest.skip(f"{module} is not installed here, so its distribution is unknown")
    return {_name(p) for p in providers}


def test_every_imported_library_is_declared() -> None:
    core, extras = _declared()
    missing = {
        module: sorted(files)
        for module, files in _imports(PACKAGE).items()
        if not _distributions(module) & (core | extras)
    }
    assert not missing, (
        f"imported but not declared in pyproject.toml: {missing}; add each to "
        "[project] dependencies, or to the extra whose code imports it"
    )


def test_the_http_backends_need_only_the_core_dependencies() -> None:
    core, _ = _declared()
    missing = {
        module: sorted(files)
        for module, files in _imports(PACKAGE / "backends" / "http").items()
        if not _distributions(module) & core
    }
    assert not missing, f"the HTTP backends import libraries outside [project] dependencies: " \
                        f"{missing}"
