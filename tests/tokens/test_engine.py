"""One engine grows a token row: no code in the package but ``tokens/engine.py`` opens a
``TokenRow``, appends ids to one or counts its turns (``Trajectory.from_dict`` reads rows
back whole, and ``TokenRow.add`` is the row's own method)."""

from __future__ import annotations

import ast
from pathlib import Path

import ors_gym

PACKAGE = Path(ors_gym.__file__).parent
ENGINE = PACKAGE / "tokens" / "engine.py"
#: Where a row is built otherwise: read back from JSON, whole.
READERS = {PACKAGE / "tokens" / "trajectory.py"}


def _grows(node: ast.AST) -> str | None:
    """What ``node`` does to a token row, if it grows one."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name == "TokenRow":
            return "opens a TokenRow"
        if name == "add" and any(k.arg == "sampled" for k in node.keywords):
            return "appends ids to a row"
        if (name == "append" and isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Attribute) and func.value.attr == "rows"):
            return "appends a row"
    target = getattr(node, "target", None)
    if isinstance(node, ast.AugAssign) and isinstance(target, ast.Attribute) and (
            target.attr == "turns" and not _is_self(target.value)):
        return "counts a row's turns"  # (an env's own turn counter, self.turns, is not)
    return None


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def test_only_the_engine_grows_a_token_row() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == ENGINE or path in READERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            what = _grows(node)
            if what:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {what}")
    assert found == []
    engine = ast.parse(ENGINE.read_text(encoding="utf-8"))
    assert {_grows(n) for n in ast.walk(engine)} >= {
        "opens a TokenRow", "appends ids to a row", "appends a row", "counts a row's turns"}
