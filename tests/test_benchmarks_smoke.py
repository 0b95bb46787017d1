"""Smoke test of the benchmark entry point and every module under ``benchmarks/``: each
runs its smallest case (tiny counts), and its rows are checked for shape only.

No timing assertions: speed claims live in ``benchmarks/`` as same-run ratios.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_http, bench_scaling, bench_vector
from benchmarks.__main__ import BENCHMARKS, NAMES, SEPARATE, _kwargs, _summary_vector
from benchmarks.__main__ import main as bench_main

_ROOT = Path(__file__).resolve().parents[1]

_SHARED = {"benchmark", "case", "ors_gym", "baseline", "baseline_name", "unit", "ratio"}


#: Every benchmark module and the test below that runs its smallest case.
_SMOKED = {
    "async": "test_async_rows_compare_free_running_with_lockstep",
    "batch": "test_batch_rows_compare_groups_and_count_connections",
    "decode": "test_entry_point_writes_json_and_chart",
    "free": "test_free_rows_compare_free_running_with_lockstep",
    "gateway": "test_gateway_rows_compare_its_own_cost_with_the_backend",
    "http": "test_http_rows_have_every_case_with_median_and_p99",
    "inprocess": "test_inprocess_rows_have_every_case_against_the_floor",
    "learn_tokens": "test_learn_tokens_trains_one_step",
    "scale": "test_scale_rows_have_latency_and_memory",
    "scaling": "test_scaling_rows_cover_both_axes_and_transports",
    "soak": "test_soak_rows_compare_cuts_with_no_faults",
    "sse": "test_sse_rows_compare_httpx_sse_with_the_old_parser",
    "tokens": "test_tokens_rows_compare_each_bridge_with_the_rerender_baseline",
    "trl": "test_trl_rows_compare_orsspec_with_openrewardspec",
    "vector": "test_vector_rows_have_baseline_ceiling_floor_and_pipelining",
}


def test_every_benchmark_module_is_smoked_and_run_by_the_entry_point() -> None:
    """A new ``bench_*.py`` fails here until a test runs its smallest case and the entry
    point runs it (or lists it as separate)."""
    modules = {p.stem.removeprefix("bench_") for p in (_ROOT / "benchmarks").glob("bench_*.py")}
    assert set(_SMOKED) == modules
    assert all(name in globals() for name in _SMOKED.values())
    assert set(NAMES) | set(SEPARATE) == modules and not set(NAMES) & set(SEPARATE)
    assert set(BENCHMARKS) == set(NAMES)
    for name in NAMES:  # every mode's settings are there
        for mode in ("quick", "default", "full"):
            assert isinstance(_kwargs(name, mode), dict)


def _check_rows(rows: list[dict[str, Any]], benchmark: str) -> None:
    assert rows, "no rows"
    for r in rows:
        assert _SHARED <= set(r), f"missing keys {_SHARED - set(r)} in {r}"
        assert r["benchmark"] == benchmark
        assert r["ors_gym"] > 0 and r["baseline"] > 0 and r["ratio"] > 0, r


def test_http_rows_have_every_case_with_median_and_p99() -> None:
    rows = bench_http.run(rounds=1, batch_ms=1.0)
    _check_rows(rows, "http")
    assert [r["case"] for r in rows] == [bench_http.FLOOR, bench_http.ORS, bench_http.ORS_HTTPX,
                                         bench_http.SDK]
    for r in rows:
        assert r["p99_us"] >= r["ors_gym"], "p99 below the median"
        assert r["cpu_us"] > 0, "the client's CPU per step was not counted"
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


def _head() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout, no baseline tree to extract: {done.stderr.strip()}")
    return done.stdout.strip()


def test_vector_rows_have_baseline_ceiling_floor_and_pipelining(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One tiny run of each newer path: a baseline from HEAD's tree (removed after), the
    pipelined case, the httpx floor, the ceiling and the ratios between them."""
    head = _head()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the baseline tree goes
    ors, pipe = bench_vector.ORS, bench_vector.PIPE
    floor, floor_pipe = bench_vector.FLOOR, bench_vector.FLOOR_PIPE
    rows = bench_vector.run(ns=(2,), seconds=0.2, rounds=1,
                            cases=(ors, pipe, floor, floor_pipe), baseline="HEAD")
    assert list(tmp_path.iterdir()) == [], "the baseline tree was left behind"
    label = bench_vector.baseline_case("HEAD")
    by = {r["case"]: r for r in rows}
    assert list(by) == [label, ors, pipe, floor, floor_pipe]
    assert by[label]["commit"] == head and by[label]["ref"] == "HEAD"
    for r in rows:
        assert r["num_envs"] == 2 and r["env_steps"] >= 2, r
        assert r["client_cpu_ms_per_env_step"] > 0, r
        # The tool's latency bounds 2 sub-envs at 100 steps/s; server CPU may bound lower.
        assert 0 < r["ceiling_steps_per_s"] <= 100.0, r
        assert r["ceiling_fraction"] == pytest.approx(
            r["env_steps_per_s"] / r["ceiling_steps_per_s"], abs=0.01)
    for case in (ors, pipe):
        assert by[case]["x_baseline"] > 0 and by[case]["client_cpu_vs_baseline"] > 0
    for case, its_floor in ((ors, floor), (pipe, floor_pipe), (label, floor)):
        assert by[case]["floor_case"] == its_floor
        assert by[case]["x_floor_cpu"] == pytest.approx(
            by[case]["client_cpu_ms_per_env_step"]
            / by[its_floor]["client_cpu_ms_per_env_step"], abs=0.01)
    for case in (floor, floor_pipe):
        assert "x_baseline" not in by[case] and "x_floor_cpu" not in by[case]
    table = bench_vector.format_table(rows)
    assert table.splitlines()[0].startswith("| N | case")
    assert all(case in table for case in by)
    assert "targets at N=" not in table  # the targets are at N = 32 and 128
    cases = [r["case"] for r in _summary_vector(rows)]
    assert "OrsVectorEnv N=2 vs @HEAD" in cases
    assert "OrsVectorEnv N=2 pipelined ceiling" in cases
    assert "OrsVectorEnv N=2 CPU" in cases
    pytest.importorskip("matplotlib")
    bench_vector.plot(rows, tmp_path / "vector.png")
    assert (tmp_path / "vector.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_vector_baseline_names_an_unknown_ref() -> None:
    _head()
    with pytest.raises(ValueError, match="no-such-ref-x"):
        bench_vector.run(ns=(1,), baseline="no-such-ref-x")


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


def test_trl_rows_compare_orsspec_with_openrewardspec() -> None:
    pytest.importorskip("trl")
    from benchmarks import bench_trl

    rows = bench_trl.run(rounds=1, batch_ms=1.0)
    _check_rows(rows, "trl")
    assert [r["case"] for r in rows] == [bench_trl.TRL, bench_trl.ORS]
    assert rows[0]["ratio"] == 1.0  # the baseline against itself
    assert len(bench_trl.verdicts(rows)) == 1


def test_tokens_rows_compare_each_bridge_with_the_rerender_baseline() -> None:
    pytest.importorskip("trl")
    from benchmarks import bench_tokens

    rows = bench_tokens.run(rounds=1, turns=3)
    _check_rows(rows, "tokens")
    bridges = {r["bridge"] for r in rows}
    assert "template" in bridges
    for bridge in bridges:
        kinds = [(r["kind"], r["turn"]) for r in rows if r["bridge"] == bridge]
        assert kinds == [("flat", 3), ("rerender", 2), ("env", 2), ("rerender", 3), ("env", 3)]
    assert len(bench_tokens.verdicts(rows)) == 2 * len(bridges)


def test_sse_rows_compare_httpx_sse_with_the_old_parser() -> None:
    from benchmarks import bench_sse

    rows = bench_sse.run(rounds=1, batch_ms=1.0, sizes=(100, 10_000))
    _check_rows(rows, "sse")
    assert [r["case"] for r in rows] == ["100 B data line", "10 kB data line",
                                         "OrsEnv.step (HTTP) client CPU", "OrsEnv.step (HTTP) wall"]
    assert rows[1]["x_line"] == 100.0 and rows[1]["x_prev_new"] > 0 and rows[1]["x_prev_old"] > 0
    assert all(r["baseline_name"] == bench_sse.OLD for r in rows)
    assert "x prev new" in bench_sse.format_table(rows).splitlines()[0]


def test_async_rows_compare_free_running_with_lockstep() -> None:
    pytest.importorskip("trl")
    from benchmarks import bench_async

    rows = bench_async.run(groups=(2,), rounds=1, quick=True)
    _check_rows(rows, "async")
    assert [r["case"] for r in rows] == ["OrsRolloutWorker (free-running) G=2",
                                         "rollout_func (lockstep) G=2"]
    assert rows[1]["wall_x_lockstep"] == 1.0 and rows[1]["cpu_x_lockstep"] == 1.0
    assert all(r["client_cpu_ms_per_episode_turn"] > 0 and r["episode_turns_cpu"] > 0
               for r in rows)


def test_gateway_rows_compare_its_own_cost_with_the_backend() -> None:
    pytest.importorskip("trl")
    pytest.importorskip("starlette")
    from benchmarks import bench_gateway

    rows = bench_gateway.run(rounds=1, turns=2, sessions=(3,), cost_ms=50.0, session_turns=2)
    own, *measured = rows
    # the gateway's own time is a difference of two timings: on a busy machine a round of
    # two turns may give it any sign, so only its presence is checked
    _check_rows(measured, "gateway")
    assert _SHARED <= set(own) and math.isfinite(own["ors_gym"]) and own["baseline"] > 0, own
    assert [r["unit"] for r in rows] == ["us/turn", "us/turn", "us/turn", "turns/s"]
    assert rows[2]["ors_gym"] > 0 and rows[2]["baseline"] > 0  # CPU a turn, a request
    sessions = rows[3]
    assert sessions["sessions"] == 3 and sessions["baseline"] == 3 * 1000 / 50.0
    assert sessions["agent_processes"] == bench_gateway.AGENT_PROCESSES
    assert sessions["turn_ms_p50"] >= 50.0  # a turn takes at least the sampler's time
    assert sessions["server_cpu_ms_per_turn"] > 0
    assert len(bench_gateway.verdicts(rows)) == 2  # own time and CPU; none at 3 sessions


def test_vector_rows_of_the_baselines_and_httpx_pool() -> None:
    """The cases the test above leaves out: gymnasium's vector envs, one env, and the
    vector env over httpx's own pool (a stand-in for ``pooled_transport``)."""
    cases = (bench_vector.HTTPX, bench_vector.ONE, bench_vector.SYNC, bench_vector.ASYNC)
    rows = bench_vector.run(ns=(1,), seconds=0.2, rounds=1, cases=cases)  # ONE: N = 1 only
    assert sorted(r["case"] for r in rows) == sorted(cases)
    assert all(r["env_steps"] >= 1 for r in rows), rows


def test_inprocess_rows_have_every_case_against_the_floor() -> None:
    from benchmarks import bench_inprocess
    from benchmarks.__main__ import _summary_inprocess

    rows = bench_inprocess.run(rounds=1, batch_ms=1.0)
    assert len(rows) >= 4 and all(r["us_per_call"] > 0 for r in rows), rows
    _check_rows(_summary_inprocess(rows), "inprocess")


def test_soak_rows_compare_cuts_with_no_faults() -> None:
    from benchmarks import bench_soak
    from benchmarks.__main__ import _summary_soak

    rows = bench_soak.run(steps=40, sessions=2, cut_every=5)
    assert len(rows) == 2 and rows[0]["ratio_vs_no_faults"] == 1.0
    assert all(r["steps_lost"] == 0 for r in rows), rows
    _check_rows(_summary_soak(rows), "soak")


def test_scale_rows_have_latency_and_memory() -> None:
    from benchmarks import bench_scale
    from benchmarks.__main__ import _summary_scale

    rows = bench_scale.run(n=4, servers=1, delay_ms=10.0, rounds=1)
    assert len(rows) == 2 and all(r["sessions"] == 4 for r in rows), rows
    _check_rows(_summary_scale(rows), "scale")


def test_batch_rows_compare_groups_and_count_connections() -> None:
    pytest.importorskip("trl")
    from benchmarks import bench_batch

    rows = bench_batch.run(groups=(2,), rounds=1, samples=bench_batch.WAVE)
    _check_rows(rows, "batch")
    assert [r.get("group") for r in rows[:2]] == [1, 2]
    assert rows[0]["ratio"] == 1.0  # one episode's call against itself
    assert len(rows) == 2 + 4  # two group sizes; connections and discoveries per case


def test_free_rows_compare_free_running_with_lockstep() -> None:
    from benchmarks import bench_free

    rows = bench_free.run(sizes=(2,), rounds=1, delays_ms=(5, 20))
    _check_rows(rows, "free")
    assert [r["kind"] for r in rows] == ["free", "lockstep", "versus"]
    assert len(bench_free.verdicts(rows)) == 1


def test_learn_tokens_trains_one_step(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from benchmarks import bench_learn_tokens

    run = bench_learn_tokens.train(0, steps=1, warm_steps=1, warm_lr=1e-2, generations=2,
                                   lr=1e-3, out=str(tmp_path))
    assert len(run["rewards"]) == 1 and run["renderer"] == "qwen3"
    summary = bench_learn_tokens.summarise(run, window=1)
    assert summary["difference"] == 0.0
