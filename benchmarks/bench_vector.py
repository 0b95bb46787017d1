"""Vector envs over a slow tool: OrsVectorEnv against gymnasium's vector envs, an older
commit of itself, one server's ceiling and httpx's own floor.

Every case steps N sub-envs of the test environment ``Latency`` environment, whose one
tool ``wait()`` sleeps ``--delay-ms`` (default 20 ms) on the server without
blocking its event loop, against ONE SDK server running in its own process
(``python -m ors_gym serve latency --port 0``), so the server does not share
the client's GIL. The cases, at each N of ``--ns`` (default 1, 8, 32, 128):

- ``OrsVectorEnv``: N sessions on one event loop over one pooled async client,
  stepped in lockstep (``step()``: every sub-env, then wait for all);
- ``OrsVectorEnv pipelined``: the same env kept full with ``send(actions,
  env_ids)`` / ``recv(min_envs=1)`` (autoreset ``NEXT_STEP``), each returned
  sub-env sent again at once; env-steps are those ``recv`` returned;
- ``SyncVectorEnv``: gymnasium's, over N ``OrsEnv`` (one blocking call after another);
- ``OrsEnv`` (at N = 1 only): one plain ``OrsEnv`` stepped; the ``OrsVectorEnv``
  rows at N = 1 get ``x_one_cpu``, the median over rounds of their client CPU per
  env-step over this one's (a vector of one should cost at most
  ``ONE_SLACK`` times one env);
- ``AsyncVectorEnv``: gymnasium's, N worker processes (default context, fork on
  Linux; ``shared_memory=False``, which text observations need);
- ``httpx floor``: no env at all; N sessions opened beforehand, and the exact
  ``/call`` request one env-step sends (recorded from ``AsyncHttpBackend``)
  sent for all N together and awaited together, again and again, through
  httpx's own pool as httpx ships it (``httpx.AsyncHTTPTransport``, one per
  two sessions, its cheapest use), each SSE body read to
  the end undecoded: the least client CPU stock httpx needs per step of
  ``step()``. (``OrsVectorEnv`` itself sends through ``ors_gym``'s leaner pool
  over httpcore's HTTP/1.1 connections, so it can go below this floor.)
- ``httpx floor pipelined``: the same, but N asyncio tasks each send again as
  soon as their answer is in, as the pipelined case does (fewer answers per
  event-loop pass, which can cost more CPU per request on both sides);
- ``OrsVectorEnv over httpx transport``: the lockstep case with the vector
  env's shared pool replaced by httpx's own ``httpx.AsyncHTTPTransport`` (same
  limits), to weigh ``ors_gym``'s pool against httpx's in the same run;
- ``OrsVectorEnv@REF`` (with ``--baseline REF``, a git ref such as ``main``):
  the lockstep case with ``ors_gym`` imported from REF's files (``git archive``
  into a temporary folder, removed after), against the same server.

Each case runs in its own process, built and warmed up (reset, two steps)
before timing; at each N the cases' processes stay up together and step in
turn, in ``--rounds`` rounds of ``--seconds`` each, the order rotating per
round, so load from elsewhere on the machine hits every case alike (only one
case steps at a time). Columns and JSON keys:

- steps/s (``env_steps_per_s``): env-steps per second, the median over rounds;
- x Sync, x Async, x baseline (``x_sync``, ``x_async``, ``x_baseline``):
  medians of the per-round throughput ratios to those cases at the same N
  (x baseline for this tree's ``OrsVectorEnv`` rows against ``OrsVectorEnv@REF``;
  ``client_cpu_vs_baseline`` is the client CPU ratio);
- client / server CPU ms/step: CPU time per env-step of the stepping process
  (not AsyncVectorEnv's workers) and of the server process (``/proc/PID/stat``
  around each run);
- ceiling (``ceiling_steps_per_s``): what one server allows, min(1000 / server
  CPU ms per env-step, N / tool latency in s); fraction (``ceiling_fraction``):
  steps/s over that ceiling (it assumes the server has a core to itself: on a
  loaded machine its share of a core is the limit and fractions drop);
- x floor CPU (``x_floor_cpu``): client CPU per env-step over the httpx floor's
  per request, for the OrsVectorEnv rows: the lockstep ones against ``httpx
  floor``, the pipelined one against ``httpx floor pipelined`` (``floor_case``
  names it; the other floor when only one ran);
- memory, each case's process plus its children, read from outside: peak RSS
  (sampled every 0.2 s; shared pages counted once per process, as ``top``
  shows them) and PSS after each run (shared pages split between the
  processes sharing them, fair to forked workers; the maximum is reported),
  and PSS over AsyncVectorEnv's.

Targets for OrsVectorEnv at N = 32 and 128: fraction >= 0.85, and client CPU
<= 0.8 ms per env-step (or, if the floor is above 0.8 ms, <= 1.1x the
matching floor); at N = 32: < 1/4 of AsyncVectorEnv's memory.

``--in-process`` runs the same cases without a server (no floors then), every
env hosting ``Latency`` itself (``env_class``), which shows the vector env
where the SDK server's CPU per call is not the limit.

Run: ``python -m benchmarks.bench_vector`` (``--quick`` for N = 1, 8, 32 and
3 rounds, ``--ns 8 32`` to choose N, ``--cases`` to choose cases,
``--baseline main`` to compare with main, ``--delay-ms`` for the tool's
latency, ``--json PATH`` / ``--plot PATH`` for where the rows and the figure
go; default ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Collection, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable from the repo
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import served_process
from benchmarks._vector_child import (
    ASYNC,
    FLOOR,
    FLOOR_PIPE,
    HTTPX,
    IN_PROCESS,
    ONE,
    ORS,
    PIPE,
    SYNC,
)
from benchmarks._vector_child import main as child_main
from benchmarks._vector_procs import ROOT, Case, ref_tree, short_ref
from ors_gym.envs.testing import TEST_ENVS

__all__ = ["ASYNC", "CASES", "FLOOR", "FLOOR_PIPE", "HTTPX", "IN_PROCESS", "ONE", "ORS", "PIPE",
           "SYNC", "baseline_case", "format_table", "plot", "run"]

CASES = (ORS, PIPE, ONE, SYNC, ASYNC, FLOOR, FLOOR_PIPE, HTTPX)
#: The floors, each the one matching a way of stepping.
FLOORS = (FLOOR, FLOOR_PIPE)
DEFAULT_NS = (1, 8, 32, 128)
RESULTS = Path(__file__).resolve().parent / "results"
#: This tree's OrsVectorEnv cases: the rows compared with the baseline and the floor.
_OURS = (ORS, PIPE, HTTPX)
#: The client CPU per env-step aimed for, and the slack over httpx's floor above it.
CPU_TARGET_MS = 0.8
FLOOR_SLACK = 1.1
FRACTION_TARGET = 0.85
#: The most a vector of one may cost over one plain env, in client CPU per env-step.
ONE_SLACK = 1.10


def baseline_case(ref: str) -> str:
    """The name of the baseline case for ``ref``: ``OrsVectorEnv@main``."""
    return f"{ORS}@{short_ref(ref)}"


# -- the server and the runs ------------------------------------------------------------------


#: A case's label -> the tree its child imports ``ors_gym`` from and the case it steps.
Sources = dict[str, tuple[Path, str]]


def _measure_n(n: int, url: str, server_pid: int, delay_ms: float, seconds: float,
               rounds: int, cases: Sequence[str], sources: Sources,
               baseline: str | None) -> list[dict[str, Any]]:
    """Every case at ``n``, in rounds of short runs, one case stepping at a time.

    All cases' processes stay up together; rounds rotate their order, so load
    from elsewhere on the machine hits every case alike.
    """
    cases = [c for c in cases if c != ONE or n == 1]  # a vector of one's reference only
    procs: dict[str, Case] = {}
    rates: dict[str, list[float]] = {case: [] for case in cases}
    try:
        for case in cases:  # started together, so their imports and warm-ups overlap
            source, step_case = sources.get(case, (ROOT, case))
            procs[case] = Case(case, n, url, delay_ms, server_pid, source, step_case)
        for proc in procs.values():
            proc.wait_setup()
        for r in range(rounds):
            k = r % len(cases)
            for case in [*cases[k:], *cases[:k]]:
                rates[case].append(procs[case].run(seconds))
    finally:
        peaks = {case: proc.close() for case, proc in procs.items()}
    return _rows(n, delay_ms, rounds, procs, rates, peaks, baseline)


def _rows(n: int, delay_ms: float, rounds: int, procs: dict[str, Case],
          rates: dict[str, list[float]], peaks: dict[str, float],
          baseline: str | None) -> list[dict[str, Any]]:
    """One row per case at ``n``: figures, ceiling, and ratios to the other cases."""

    def x(case: str, other: str) -> float:
        pairs = zip(rates[case], rates[other], strict=True)
        return round(statistics.median(a / b for a, b in pairs), 2)

    rows: dict[str, dict[str, Any]] = {}
    for case, proc in procs.items():
        env_steps = sum(run["env_steps"] for run in proc.runs)
        client_ms = 1000 * sum(run["cpu"] for run in proc.runs) / env_steps
        server_ms = 1000 * proc.server_cpu / env_steps
        rate = statistics.median(rates[case])
        ceiling = _ceiling(n, delay_ms, server_ms)
        row: dict[str, Any] = {
            "benchmark": "vector",
            "case": case,
            "num_envs": n,
            "delay_ms": delay_ms,
            "rounds": rounds,
            "env_steps": env_steps,
            "steps": round(env_steps / n, 1),
            "env_steps_per_s": round(rate, 1),
            "client_cpu_ms_per_env_step": round(client_ms, 3),
            "server_cpu_ms_per_env_step": round(server_ms, 3),
            "ceiling_steps_per_s": None if ceiling is None else round(ceiling, 1),
            "ceiling_fraction": None if ceiling is None else round(rate / ceiling, 3),
            "setup_s": round(proc.setup, 2),
            "peak_rss_mb": round(peaks[case], 1),
            "pss_mb": round(max(proc.pss), 1),
        }
        for other, key in ((SYNC, "x_sync"), (ASYNC, "x_async")):
            if other in procs:
                row[key] = x(case, other)
        if ASYNC in procs:
            row["pss_vs_async"] = round(row["pss_mb"] / max(procs[ASYNC].pss), 3)
        rows[case] = row
    if baseline is not None and baseline in rows:
        base = rows[baseline]
        for case in _OURS:
            if case in rows:
                rows[case]["x_baseline"] = x(case, baseline)
                rows[case]["client_cpu_vs_baseline"] = round(
                    rows[case]["client_cpu_ms_per_env_step"]
                    / base["client_cpu_ms_per_env_step"], 3)
    for ours in (*_OURS, baseline):
        if ours is not None and ours in rows and ONE in procs:
            rows[ours]["x_one_cpu"] = round(statistics.median(
                _cpu_per_step(a) / _cpu_per_step(b)
                for a, b in zip(procs[ours].runs, procs[ONE].runs, strict=True)), 3)
        floor = _floor_of(ours, rows)
        if ours is not None and ours in rows and floor is not None:
            rows[ours]["floor_case"] = floor
            rows[ours]["x_floor_cpu"] = round(rows[ours]["client_cpu_ms_per_env_step"]
                                              / rows[floor]["client_cpu_ms_per_env_step"], 2)
    return list(rows.values())


def _cpu_per_step(run: dict[str, float]) -> float:
    return run["cpu"] / run["env_steps"]


def _floor_of(case: str | None, present: Collection[str]) -> str | None:
    """The floor ``case`` is compared with: the one stepping as it steps, else the other."""
    match, other = (FLOOR_PIPE, FLOOR) if case == PIPE else (FLOOR, FLOOR_PIPE)
    return match if match in present else other if other in present else None


def _ceiling(n: int, delay_ms: float, server_ms: float) -> float | None:
    """One server's most env-steps/s: its CPU per step, and N calls per tool latency."""
    limits = []
    if server_ms > 0:
        limits.append(1000 / server_ms)
    if delay_ms > 0:
        limits.append(n / (delay_ms / 1000))
    return min(limits) if limits else None


def run(
    ns: Sequence[int] = DEFAULT_NS,
    delay_ms: float = 20.0,
    seconds: float = 1.0,
    rounds: int = 5,
    cases: Sequence[str] = CASES,
    in_process: bool = False,
    baseline: str | None = None,
) -> list[dict[str, Any]]:
    """Measure every case at every N against one server; one row per (case, N).

    ``baseline``: a git ref whose ``OrsVectorEnv`` runs as one more case,
    ``OrsVectorEnv@REF``. With ``in_process`` there is no server (and no
    floors): every env hosts ``Latency`` itself. See the module docstring for
    the rows' keys.
    """
    cases = [c for c in cases if not (in_process and c in FLOORS)]
    with ExitStack() as stack:
        sources: Sources = {}
        label, commit = None, ""
        if baseline is not None:
            label = baseline_case(baseline)
            tree, commit = stack.enter_context(ref_tree(baseline))
            sources[label] = (tree, ORS)
            at = cases.index(ORS) if ORS in cases else 0
            cases = [*cases[:at], label, *cases[at:]]
        if in_process:
            url, server_pid = IN_PROCESS, 0
        else:
            server_pid, url = stack.enter_context(served_process([TEST_ENVS["Latency"]]))
        rows: list[dict[str, Any]] = []
        for n in ns:
            rows += _measure_n(n, url, server_pid, delay_ms, seconds, rounds, cases, sources,
                               label)
    for row in rows:
        row["transport"] = IN_PROCESS if in_process else "http"
        if row["case"] == label:
            row["ref"], row["commit"] = baseline, commit
    return rows


# -- the table and the figure -----------------------------------------------------------------

#: Columns of the table: header, the row's key, how its value is shown.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("N", "num_envs", "d"),
    ("case", "case", "s"),
    ("steps/s", "env_steps_per_s", ".1f"),
    ("x Sync", "x_sync", ".2f"),
    ("x Async", "x_async", ".2f"),
    ("x baseline", "x_baseline", ".2f"),
    ("client CPU ms/step", "client_cpu_ms_per_env_step", ".3f"),
    ("CPU x baseline", "client_cpu_vs_baseline", ".2f"),
    ("server CPU ms/step", "server_cpu_ms_per_env_step", ".3f"),
    ("ceiling steps/s", "ceiling_steps_per_s", ".0f"),
    ("fraction", "ceiling_fraction", ".2f"),
    ("x floor CPU", "x_floor_cpu", ".2f"),
    ("CPU x OrsEnv", "x_one_cpu", ".2f"),
    ("peak RSS MB", "peak_rss_mb", ".1f"),
    ("PSS MB", "pss_mb", ".1f"),
    ("PSS x Async", "pss_vs_async", ".3f"),
)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table (aligned), then the targets."""
    cells = [[h for h, _, _ in _COLUMNS]] + [
        ["-" if r.get(key) is None else format(r[key], spec) for _, key, spec in _COLUMNS]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]

    def line(values: list[str]) -> str:
        padded = [v.ljust(w) if spec == "s" else v.rjust(w)
                  for v, w, (_, _, spec) in zip(values, widths, _COLUMNS, strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":" if spec != "s" else "-" * (w + 2))
                          for w, (_, _, spec) in zip(widths, _COLUMNS, strict=True)) + "|"
    return "\n".join([line(cells[0]), rule, *map(line, cells[1:]), *_targets(rows)])


def _targets(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The speed targets at N = 32 and 128, the memory target at N = 32."""
    by = {(r["case"], r["num_envs"]): r for r in rows}
    lines = []
    for n in (32, 128):
        for case in _OURS:
            r = by.get((case, n))
            if r is None:
                continue
            floor = by.get((r.get("floor_case"), n))
            lines.append(f"targets at N={n} ({case}):")
            if r.get("ceiling_fraction") is not None:
                lines.append(_verdict(f"fraction of the one-server ceiling >= {FRACTION_TARGET}",
                                      r["ceiling_fraction"], r["ceiling_fraction"]
                                      >= FRACTION_TARGET))
            cpu, limit, why = r["client_cpu_ms_per_env_step"], CPU_TARGET_MS, ""
            if floor is not None and floor["client_cpu_ms_per_env_step"] > CPU_TARGET_MS:
                floor_ms = floor["client_cpu_ms_per_env_step"]
                limit = FLOOR_SLACK * floor_ms
                why = f" ({FLOOR_SLACK}x the httpx floor's {floor_ms:.3f}, above {CPU_TARGET_MS})"
            lines.append(_verdict(f"client CPU ms/step <= {limit:.3f}{why}", cpu, cpu <= limit))
    for case in (*_OURS, *(c for c, n in by if n == 1 and "@" in c)):
        r = by.get((case, 1))
        if r is not None and "x_one_cpu" in r:
            lines.append(f"target at N=1 ({case}, a vector of one):")
            lines.append(_verdict(f"client CPU per env-step <= {ONE_SLACK}x one OrsEnv's",
                                  r["x_one_cpu"], r["x_one_cpu"] <= ONE_SLACK))
    r = by.get((ORS, 32))
    if r is not None and "pss_vs_async" in r:
        lines.append("target at N=32 (OrsVectorEnv, memory):")
        lines.append(_verdict("< 1/4 of AsyncVectorEnv's memory (PSS)", r["pss_vs_async"],
                              r["pss_vs_async"] < 0.25))
    return lines


def _verdict(label: str, value: float, ok: bool) -> str:
    return f"  {label}: {value:g} ({'met' if ok else 'MISSED'})"


def _cases_in(rows: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["case"] for r in rows))


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Throughput (with the ORS rows' ceiling) and memory against N, one line per case
    (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for case in _cases_in(rows):
        mine = [r for r in rows if r["case"] == case]
        ns = [r["num_envs"] for r in mine]
        left.plot(ns, [r["env_steps_per_s"] for r in mine], marker="o", label=case)
        right.plot(ns, [r["pss_mb"] for r in mine], marker="o", label=case)
    ceiling = [r for r in rows if r["case"] == ORS and r.get("ceiling_steps_per_s")]
    if ceiling:
        left.plot([r["num_envs"] for r in ceiling], [r["ceiling_steps_per_s"] for r in ceiling],
                  "k--", label="one-server ceiling")
    for ax, title in ((left, "throughput (env-steps/s)"), (right, "memory, PSS (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("num_envs")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    delay = rows[0]["delay_ms"] if rows else "?"
    where = ("every env hosting it in-process" if rows and rows[0].get("transport") == IN_PROCESS
             else "one SDK server process")
    fig.suptitle(f"Latency env, {delay:g} ms tool, {where}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # the measured process (see _vector_child)
        child_main(argv[1:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N = 1, 8, 32 and 3 rounds")
    parser.add_argument("--ns", type=int, nargs="+", help="the N to measure (default 1 8 32 128)")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the tool's latency")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="length of one timed run of one case (default 1)")
    parser.add_argument("--rounds", type=int, help="timed runs per case (default 5)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--baseline", metavar="REF",
                        help="also run OrsVectorEnv from this git ref's tree (e.g. main)")
    parser.add_argument("--in-process", action="store_true",
                        help="no server: every env hosts Latency in its own process")
    parser.add_argument("--json", type=Path, default=RESULTS / "bench_vector.json",
                        help="where to write the rows")
    parser.add_argument("--plot", type=Path, default=RESULTS / "bench_vector.png",
                        help="where to draw the figure (needs matplotlib)")
    args = parser.parse_args(argv)
    ns = args.ns or ((1, 8, 32) if args.quick else DEFAULT_NS)
    rounds = args.rounds or (3 if args.quick else 5)
    try:
        rows = run(ns=ns, delay_ms=args.delay_ms, seconds=args.seconds, rounds=rounds,
                   cases=args.cases, in_process=args.in_process, baseline=args.baseline)
    except ValueError as exc:  # a bad --baseline
        parser.error(str(exc))
    print(format_table(rows))
    print(f"tool: Latency.wait() sleeping {args.delay_ms:g} ms; {os.cpu_count()} CPUs; "
          f"{rounds} rounds of {args.seconds:g} s; ratios against the cases at the same N in "
          "this run; CPU ms: per env-step (client: the stepping process only, not "
          "AsyncVectorEnv's workers); ceiling: min(1000 / server CPU ms, N / tool latency)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))
    try:
        plot(rows, args.plot)
    except ImportError:
        print("matplotlib is not installed: no figure drawn")


if __name__ == "__main__":
    main()
