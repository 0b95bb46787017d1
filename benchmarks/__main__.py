"""Run every benchmark: ``python -m benchmarks [--quick | --full] [--only NAME,...]``.

Writes ``benchmarks/results/latest.json`` (every module's raw rows plus the
summary table) and ``benchmarks/results/latest.png`` (the ratio per case), and
prints one table: case, ors_gym figure, baseline figure, ratio. Each ratio
compares ors_gym with a baseline measured in the same run; absolute figures
depend on the machine and its load. A module that fails is reported and
skipped; the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import RESULTS, format_rows, row, write_json

Rows = list[dict[str, Any]]
NAMES = ("http", "inprocess", "vector", "decode", "scaling", "soak", "scale", "trl", "tokens",
         "sse", "batch", "async", "free", "gateway")
#: Modules under benchmarks/ the runner leaves out: a learning curve of minutes, not a ratio.
SEPARATE = ("learn_tokens",)


def _gateway_quick() -> dict[str, Any]:
    from benchmarks.bench_gateway import QUICK

    return dict(QUICK)


def _kwargs(name: str, mode: str) -> dict[str, Any]:
    """Each module's ``run`` settings for ``quick``, ``default`` or ``full``."""
    table: dict[str, dict[str, dict[str, Any]]] = {
        "http": {"quick": {"rounds": 5}, "default": {}, "full": {}},
        "inprocess": {"quick": {"rounds": 5}, "default": {}, "full": {}},
        "vector": {"quick": {"ns": (1, 8), "rounds": 2, "seconds": 0.5},
                   "default": {"ns": (1, 8, 32), "rounds": 3}, "full": {}},
        "decode": {"quick": {"repeats": 7}, "default": {}, "full": {}},
        "scaling": {"quick": {"rounds": 3}, "default": {}, "full": {}},
        "soak": {"quick": {"steps": 500, "sessions": 8}, "default": {"steps": 2_000},
                 "full": {}},
        "scale": {"quick": {"n": 200, "delay_ms": 1000.0, "rounds": 2},
                  "default": {"rounds": 3}, "full": {}},
        "trl": {"quick": {"rounds": 3}, "default": {}, "full": {}},
        "tokens": {"quick": {"rounds": 5}, "default": {}, "full": {}},
        "sse": {"quick": {"rounds": 3}, "default": {}, "full": {}},
        "batch": {"quick": {"groups": (8,), "rounds": 1}, "default": {}, "full": {}},
        "async": {"quick": {"groups": (4,), "rounds": 1, "quick": True}, "default": {},
                  "full": {"rounds": 5}},
        "free": {"quick": {"sizes": (8,), "rounds": 1}, "default": {}, "full": {}},
        "gateway": {"quick": _gateway_quick(), "default": {}, "full": {}},
    }
    return table[name][mode]


# -- each module's rows as summary rows (case, ors_gym, baseline, ratio) ---------------------

def _summary_inprocess(rows: Rows) -> Rows:
    floor = next(r for r in rows if r["ratio_vs_floor"] == 1.0 or "floor" in r["case"])
    return [row("inprocess", r["case"], r["us_per_call"], floor["us_per_call"],
                r["ratio_vs_floor"], "us/call", floor["case"]) for r in rows]


def _summary_decode(rows: Rows) -> Rows:
    return [row("decode", r["case"], r["ors_gym_us"], r["pillow_us"], r["ratio"], "us",
                "pillow decode") for r in rows]


def _summary_vector(rows: Rows) -> Rows:
    by = {(r["case"], r["num_envs"]): r for r in rows}
    out = []
    for r in rows:
        n = r["num_envs"]
        if r["case"] == "OrsVectorEnv":
            for other, key in (("SyncVectorEnv", "x_sync"), ("AsyncVectorEnv", "x_async")):
                if (other, n) in by and key in r:
                    # The ratio is ors / baseline throughput: higher is better here.
                    out.append(row("vector", f"OrsVectorEnv N={n} vs {other}",
                                   r["env_steps_per_s"], by[(other, n)]["env_steps_per_s"],
                                   r[key], "steps/s", other))
            if "pss_vs_async" in r and ("AsyncVectorEnv", n) in by:
                out.append(row("vector", f"OrsVectorEnv N={n} memory", r["pss_mb"],
                               by[("AsyncVectorEnv", n)]["pss_mb"], r["pss_vs_async"], "PSS MB",
                               "AsyncVectorEnv"))
        if r["case"] not in ("OrsVectorEnv", "OrsVectorEnv pipelined"):
            continue
        name = r["case"].replace("OrsVectorEnv", "OrsVectorEnv N=" + str(n), 1)
        base = next((b for b in rows if b["num_envs"] == n and "ref" in b), None)
        if base is not None and "x_baseline" in r:
            out.append(row("vector", f"{name} vs @{base['ref']}", r["env_steps_per_s"],
                           base["env_steps_per_s"], r["x_baseline"], "steps/s", base["case"]))
        if r.get("ceiling_fraction") is not None:
            out.append(row("vector", f"{name} ceiling", r["env_steps_per_s"],
                           r["ceiling_steps_per_s"], r["ceiling_fraction"], "steps/s",
                           "one-server ceiling"))
        floor = by.get((r.get("floor_case"), n))
        if "x_floor_cpu" in r and floor is not None:
            # Lower is better: client CPU per env-step over httpx's per request.
            out.append(row("vector", f"{name} CPU", 1000 * r["client_cpu_ms_per_env_step"],
                           1000 * floor["client_cpu_ms_per_env_step"], r["x_floor_cpu"],
                           "us/step", floor["case"]))
    return out


def _summary_soak(rows: Rows) -> Rows:
    base = rows[0]
    return [row("soak", f"{r['case']} (lost {r.get('steps_lost', '?')})", r["steps_per_s"],
                base["steps_per_s"], r["ratio_vs_no_faults"], "steps/s", base["case"])
            for r in rows]


def _summary_scale(rows: Rows) -> Rows:
    out = []
    for r in rows:
        name = f"{r['case']} x{r['sessions']} sessions"
        for pct in ("p50", "p99"):
            out.append(row("scale", f"{name} {pct} step", r[f"{pct}_ms"], r["delay_ms"],
                           r[f"{pct}_x_delay"], "ms", "the tool's own latency"))
        out.append(row("scale", f"{name} memory", r["kb_per_session"], 100.0,
                       round(r["kb_per_session"] / 100.0, 3), "KB/session", "target 100 KB"))
    return out


def _same(rows: Rows) -> Rows:
    return rows


#: name -> (module, summary of its rows)
BENCHMARKS: dict[str, tuple[str, Callable[[Rows], Rows]]] = {
    "http": ("benchmarks.bench_http", _same),
    "inprocess": ("benchmarks.bench_inprocess", _summary_inprocess),
    "vector": ("benchmarks.bench_vector", _summary_vector),
    "decode": ("benchmarks.bench_decode", _summary_decode),
    "scaling": ("benchmarks.bench_scaling", _same),
    "soak": ("benchmarks.bench_soak", _summary_soak),
    "scale": ("benchmarks.bench_scale", _summary_scale),
    "trl": ("benchmarks.bench_trl", _same),
    "tokens": ("benchmarks.bench_tokens", _same),
    "sse": ("benchmarks.bench_sse", _same),
    "batch": ("benchmarks.bench_batch", _same),
    "async": ("benchmarks.bench_async", _same),
    "free": ("benchmarks.bench_free", _same),
    "gateway": ("benchmarks.bench_gateway", _same),
}


def run_all(names: list[str], mode: str) -> dict[str, Any]:
    """Run the named benchmarks; raw rows, summary rows and notes (failures, skips)."""
    raw: dict[str, Rows] = {}
    summary: Rows = []
    notes: list[str] = []
    for name in names:
        module_name, summarise = BENCHMARKS[name]
        start = time.perf_counter()
        print(f"== {name} ({module_name}, {mode}) ...", file=sys.stderr, flush=True)
        try:  # imported lazily: one module failing to import skips only itself
            module = importlib.import_module(module_name)
            rows = module.run(**_kwargs(name, mode))
        except Exception as exc:  # report it and go on with the others
            notes.append(f"{name}: skipped, {type(exc).__name__}: {exc}")
            traceback.print_exc(file=sys.stderr)
            continue
        raw[name] = rows
        try:
            summary += summarise(rows)
        except (KeyError, StopIteration) as exc:
            notes.append(f"{name}: rows not summarised ({type(exc).__name__}: {exc})")
        print(f"   {name} took {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return {"raw": raw, "summary": summary, "notes": notes}


def plot(summary: Rows, path: Path) -> None:
    """Horizontal bars of the ratio per case (log scale when ratios span > 20x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in summary if r.get("ratio")]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(10, max(3.0, 0.28 * len(rows) + 1)))
    labels = [f"{r['benchmark']}: {r['case']}" for r in rows]
    ratios = [r["ratio"] for r in rows]
    colours = [f"C{list(BENCHMARKS).index(r['benchmark']) % 10}" for r in rows]
    ax.barh(range(len(rows)), ratios, color=colours)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color="k", lw=0.8)
    if max(ratios) / min(ratios) > 20:
        ax.set_xscale("log")
    ax.set_xlabel("ratio to the baseline measured in the same run (see table for direction)")
    ax.set_title("ors_gym benchmarks (python -m benchmarks)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="few rounds, small N: a fast pass")
    mode.add_argument("--full", action="store_true",
                      help="each module's own full settings (vector N to 128, 10,000-step soak)")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(NAMES)}")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where latest.json/png go")
    args = parser.parse_args(argv)
    names = list(NAMES)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(names) - set(NAMES))
        if unknown:
            parser.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(NAMES)}")
    level = "quick" if args.quick else "full" if args.full else "default"
    started = time.time()
    result = run_all(names, level)
    table = format_rows(result["summary"])
    print(table)
    for note in result["notes"]:
        print(f"note: {note}")
    write_json({
        "command": "python -m benchmarks" + "".join(f" {a}" for a in (argv or sys.argv[1:])),
        "mode": level, "started_unix": round(started), "seconds": round(time.time() - started),
        "python": platform.python_version(), "machine": platform.machine(),
        "summary": result["summary"], "raw": result["raw"], "notes": result["notes"],
    }, args.out / "latest.json")
    plot(result["summary"], args.out / "latest.png")
    print(f"wrote {args.out / 'latest.json'} and {args.out / 'latest.png'}")
    return 1 if result["notes"] else 0


if __name__ == "__main__":
    sys.exit(main())
