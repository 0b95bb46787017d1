"""``--baseline REF`` for the single-env benchmarks: the same benchmark over another commit.

The benchmark of ``REF``'s tree (``git archive``, as ``bench_vector`` does) runs
in a child process right after this tree's, with the same options; each run
times its own floor, so the comparison is between ratios to the floor, which
load on the machine inflates less than absolute times.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import child_env
from benchmarks._vector_procs import ref_tree, short_ref

__all__ = ["baseline_rows", "compare", "with_baseline"]


def baseline_rows(module: str, ref: str, argv: Sequence[str]) -> tuple[list[dict[str, Any]], str]:
    """The rows ``python -m benchmarks.<module> *argv`` gives over ``ref``'s tree, and the
    commit measured."""
    with ref_tree(ref) as (tree, commit), tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *argv, "--json", str(out)],
                       cwd=tree, env=child_env([str(tree)]), check=True,
                       stdout=subprocess.DEVNULL)
        return json.loads(out.read_text()), commit


def compare(ours: Sequence[dict[str, Any]], base: Sequence[dict[str, Any]], ref: str,
            commit: str, keys: Sequence[tuple[str, str]]) -> str:
    """A table of each case's figures (``keys``: (row key, column title)) here and at
    ``ref``, with their quotient (below 1: this tree is faster)."""
    label = f"@{short_ref(ref)}"
    by_case = {r["case"]: r for r in base}
    head = f"{'case':<36}" + "".join(
        f" {title:>14} {title + label:>18} {'x baseline':>10}" for _, title in keys)
    lines = [head]
    for r in ours:
        b = by_case.get(r["case"])
        if b is None:
            continue
        cells = ""
        for key, _ in keys:
            mine, theirs = r.get(key), b.get(key)
            if mine is None or theirs is None:
                cells += f" {'-':>14} {'-':>18} {'-':>10}"
            else:
                cells += f" {mine:>14.2f} {theirs:>18.2f} {mine / theirs:>10.2f}"
        lines.append(f"{r['case']:<36}{cells}")
    lines.append(f"baseline {ref} = {commit[:12]}; x baseline below 1: this tree is faster")
    return "\n".join(lines)


def with_baseline(module: str, rows: list[dict[str, Any]], ref: str, argv: Sequence[str],
                  keys: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Run ``module`` over ``ref``'s tree, print the comparison of ``keys``, and return
    ``rows`` followed by the baseline's rows (their cases suffixed ``@ref``)."""
    base, commit = baseline_rows(module, ref, argv)
    print()
    print(compare(rows, base, ref, commit, keys))
    tagged = [{**r, "ref": ref, "commit": commit, "case": f"{r['case']}@{ref}"} for r in base]
    return rows + tagged
