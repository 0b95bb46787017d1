"""Smoke test of the benchmark entry point and its newer modules: tiny counts, row shapes only.

No timing assertions: speed claims live in ``benchmarks/`` as same-run ratios.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_http, bench_scaling
from benchmarks.__main__ import main as bench_main

_SHARED = {"benchmark", "case", "ors_gym", "baseline", "baseline_name", "unit", "ratio"}


def _check_rows(rows: list[dict[str, Any]], benchmark: str) -> None:
    assert rows, "no rows"
    for r in rows:
        assert _SHARED <= set(r), f"missing keys {_SHARED - set(r)} in {r}"
        assert r["benchmark"] == benchmark
        assert r["ors_gym"] > 0 and r["baseline"] > 0 and r["ratio"] > 0, r


def test_http_rows_have_every_case_with_median_and_p99() -> None:
    rows = bench_http.run(rounds=1, batch_ms=1.0)
    _check_rows(rows, "http")
    assert [r["case"] for r in rows] == [bench_http.FLOOR, bench_http.ORS, bench_http.SDK]
    for r in rows:
        assert r["p99_us"] >= r["ors_gym"], "p99 below the median"
        assert r["steps"] >= 3
    assert rows[0]["ratio"] == 1.0  # the floor against itself
    assert len(bench_http.verdicts(rows)) == 2


def test_scaling_rows_cover_both_axes_and_transports() -> None:
    rows = bench_scaling.run(rounds=1, batch_ms=1.0, tool_counts=(1, 3),
                             result_sizes=(100, 10_000))
    _check_rows(rows, "scaling")
    assert {(r["axis"], r["transport"]) for r in rows} == {
        (axis, transport) for axis in ("tools", "result bytes")
        for transport in ("in-process", "http")
    }
    assert len(rows) == 8
    firsts = [r for r in rows if r["x_input"] == 1]
    assert len(firsts) == 4 and all(r["ratio"] == 1.0 for r in firsts)
    assert {r["x_input"] for r in rows} == {1, 3, 100}


def test_generated_tools_module_has_the_asked_tool_counts(tmp_path: Path) -> None:
    import importlib
    import sys

    name = bench_scaling.write_tools_module(tmp_path, (2, 5))
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
        for n in (2, 5):
            cls = getattr(module, f"Tools{n}")
            tools = [a for a in vars(cls) if a.startswith("t") and a[1:].isdigit()]
            assert len(tools) == n
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_entry_point_writes_json_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import __main__ as entry

    real = entry._kwargs

    def tiny(name: str, mode: str) -> dict[str, Any]:
        if name == "decode":
            return {"repeats": 1}
        return real(name, mode)

    monkeypatch.setattr(entry, "_kwargs", tiny)
    code = bench_main(["--quick", "--only", "decode", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads((tmp_path / "latest.json").read_text())
    assert data["notes"] == [] and set(data["raw"]) == {"decode"}
    _check_rows(data["summary"], "decode")
    assert "ratio" in out.splitlines()[0]
    assert (tmp_path / "latest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_entry_point_rejects_unknown_names(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        bench_main(["--only", "nope", "--out", str(tmp_path)])
