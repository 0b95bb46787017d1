"""Vector envs over a slow tool: OrsVectorEnv vs gymnasium's SyncVectorEnv / AsyncVectorEnv.

Every case steps N sub-envs of the bundled ``Latency`` environment, whose one
tool ``wait()`` sleeps ``--delay-ms`` (default 20 ms) on the server without
blocking its event loop, against ONE SDK server running in its own process
(``python -m ors_gym serve latency --port 0``), so the server does not share
the client's GIL. The cases, at each N of ``--ns`` (default 1, 8, 32, 128):

- ``OrsVectorEnv``: N sessions on one event loop over one pooled async client;
- ``SyncVectorEnv``: gymnasium's, over N ``OrsEnv`` (one blocking call after another);
- ``AsyncVectorEnv``: gymnasium's, N worker processes (default context, fork on
  Linux; ``shared_memory=False``, which text observations need).

Each case runs in its own process, built and warmed up (reset, two steps)
before timing; at each N the cases' processes stay up together and step in
turn, in ``--rounds`` rounds of ``--seconds`` each, the order rotating per
round, so load from elsewhere on the machine hits every case alike (only one
case steps at a time). Throughput is env-steps per second (N x steps /
seconds), the median over rounds; ratios are medians of the per-round ratios
between cases at the same N. Memory is each case's process plus its children,
read from outside: peak RSS (sampled every 0.2 s; shared pages counted once
per process, as ``top`` shows them) and PSS after each run (shared pages split
between the processes sharing them, which is fair to forked workers; the
maximum is reported). Targets (issue 6), at N=32: OrsVectorEnv >= 20x
SyncVectorEnv and >= 2x AsyncVectorEnv throughput, with < 1/4 of
AsyncVectorEnv's memory.

``--in-process`` runs the same cases without a server, every env hosting
``Latency`` itself (``env_class``), which shows the vector env where the SDK
server's CPU per call is not the limit.

Run: ``python -m benchmarks.bench_vector`` (``--quick`` for N = 1, 8, 32 and
3 rounds, ``--ns 8 32`` to choose N, ``--delay-ms`` for the tool's latency,
``--json PATH`` / ``--plot PATH`` for where the rows and the figure go;
default ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `ors_gym` importable from the repo
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ORS = "OrsVectorEnv"
SYNC = "SyncVectorEnv"
ASYNC = "AsyncVectorEnv"
CASES = (ORS, SYNC, ASYNC)
DEFAULT_NS = (1, 8, 32, 128)
RESULTS = Path(__file__).resolve().parent / "results"
_ROOT = Path(__file__).resolve().parents[1]
_WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}
_LENGTH = 10_000_000  # calls per episode: no episode ends during a run
LATENCY = "ors_gym.envs.latency:Latency"
#: The ``url`` of the in-process variant: every env hosts Latency itself (LocalBackend).
IN_PROCESS = "in-process"


# -- the measured process ----------------------------------------------------------------------


def _make(case: str, n: int, url: str) -> Any:
    from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

    from ors_gym.vector import OrsVectorEnv, make_env_fns

    # No step limit: every case steps the same episodes from start to end of the run.
    where: dict[str, Any] = (
        {"env_class": LATENCY} if url == IN_PROCESS else {"base_url": url, "env_name": "latency"}
    )
    if case == ORS:
        return OrsVectorEnv(n, max_steps=_LENGTH, **where)
    env_id = "ors/Latency-v0" if url == IN_PROCESS else "ors/Remote-v0"
    fns = make_env_fns(env_id, n, max_steps=_LENGTH, max_episode_steps=_LENGTH, **where)
    if case == SYNC:
        return SyncVectorEnv(fns)
    return AsyncVectorEnv(fns, shared_memory=False)


def _child(case: str, n: int, url: str, delay_ms: float) -> None:
    """Build the vector env, then step it on the parent's command, reporting each run.

    Commands on stdin: ``run SECONDS`` (step for at least that long, at least
    one step; answer a JSON line) and ``close``.
    """
    from ors_gym.serving import quiet_sdk_logging

    quiet_sdk_logging()
    started = time.perf_counter()
    env = _make(case, n, url)
    env.reset(seed=0, options={"task_spec": {"delay_ms": delay_ms, "length": _LENGTH}})
    actions = (_WAIT,) * n
    for _ in range(2):
        env.step(actions)
    print(json.dumps({"setup": time.perf_counter() - started}), flush=True)
    for command in sys.stdin:
        if not command.startswith("run "):
            break
        seconds = float(command.split()[1])
        steps, t0, cpu0 = 0, time.perf_counter(), time.process_time()
        while steps < 1 or time.perf_counter() - t0 < seconds:
            _, _, _, truncated, info = env.step(actions)
            if truncated.any():
                raise RuntimeError(f"a sub-env failed: {info.get('error')}")
            steps += 1
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        print(json.dumps({"steps": steps, "seconds": elapsed, "cpu": cpu}), flush=True)
    env.close()


# -- memory of a process tree, read from outside ---------------------------------------------


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    try:
        import psutil

        proc = psutil.Process(pid)
        return [pid, *(p.pid for p in proc.children(recursive=True))]
    except ImportError:
        pass
    except Exception:  # the process ended
        return []
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def _proc_kb(path: str, field: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_mb(pids: Sequence[int]) -> float:
    return sum(_proc_kb(f"/proc/{p}/status", "VmRSS") for p in pids) / 1024


def _pss_mb(pids: Sequence[int]) -> float:
    return sum(_proc_kb(f"/proc/{p}/smaps_rollup", "Pss") for p in pids) / 1024


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (0 for pid 0)."""
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _PeakSampler:
    """Peak RSS of a process tree, sampled every ``interval`` seconds in a thread."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, _rss_mb(_tree(self.pid)))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


# -- the server and the runs ------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    env.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    return env


def _start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ors_gym", "serve", "latency", "--port", "0"],
        stdout=subprocess.PIPE, text=True, env=_env(), cwd=_ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "ors-gym: serving latency at http://127.0.0.1:PORT"
    if " at http" not in line:
        proc.kill()
        raise RuntimeError(f"the ORS server did not start: {line!r}")
    return proc, line.strip().rsplit(" ", 1)[1]


class _Case:
    """One case's process: started, stepped on command, measured from outside."""

    def __init__(self, case: str, n: int, url: str, delay_ms: float, server_pid: int) -> None:
        self.case = case
        self.n = n
        self.server_pid = server_pid
        self.server_cpu = 0.0
        cmd = [sys.executable, "-m", "benchmarks.bench_vector", "--child", case, str(n), url,
               str(delay_ms)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=_env(), cwd=_ROOT)
        self.sampler = _PeakSampler(self.proc.pid)
        self.setup = float(self._answer()["setup"])
        self.runs: list[dict[str, float]] = []
        self.pss: list[float] = []

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.case} at N={self.n} failed (exit {self.proc.wait()})")
        return dict(json.loads(line))

    def _send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def run(self, seconds: float) -> float:
        """Step for ``seconds``; returns env-steps per second. Reads PSS after."""
        before = _cpu_s(self.server_pid)
        self._send(f"run {seconds}")
        result = self._answer()
        self.server_cpu += _cpu_s(self.server_pid) - before
        self.runs.append(result)
        self.pss.append(_pss_mb(_tree(self.proc.pid)))
        return self.n * result["steps"] / result["seconds"]

    def close(self) -> float:
        """End the process; returns its tree's peak RSS."""
        peak = self.sampler.stop()
        if self.proc.poll() is None:
            try:
                self._send("close")
                self.proc.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        return peak


def _measure_n(n: int, url: str, server_pid: int, delay_ms: float, seconds: float,
               rounds: int, cases: Sequence[str]) -> list[dict[str, Any]]:
    """Every case at ``n``, in rounds of short runs, one case stepping at a time.

    All cases' processes stay up together; rounds rotate their order, so load
    from elsewhere on the machine hits every case alike. Figures are medians
    over rounds, ratios medians of the per-round ratios.
    """
    procs: dict[str, _Case] = {}
    rates: dict[str, list[float]] = {case: [] for case in cases}
    try:
        for case in cases:
            procs[case] = _Case(case, n, url, delay_ms, server_pid)
        for r in range(rounds):
            order = list(cases[r % len(cases):]) + list(cases[: r % len(cases)])
            for case in order:
                rates[case].append(procs[case].run(seconds))
    finally:
        peaks = {case: proc.close() for case, proc in procs.items()}
    rows = []
    for case in cases:
        proc = procs[case]
        steps = sum(run["steps"] for run in proc.runs)
        row: dict[str, Any] = {
            "benchmark": "vector",
            "case": case,
            "num_envs": n,
            "delay_ms": delay_ms,
            "rounds": rounds,
            "steps": steps,
            "env_steps_per_s": round(statistics.median(rates[case]), 1),
            "client_cpu_ms_per_env_step": round(
                1000 * sum(run["cpu"] for run in proc.runs) / (n * steps), 3
            ),
            "server_cpu_ms_per_env_step": round(1000 * proc.server_cpu / (n * steps), 3),
            "setup_s": round(proc.setup, 2),
            "peak_rss_mb": round(peaks[case], 1),
            "pss_mb": round(max(proc.pss), 1),
        }
        for other, key in ((SYNC, "x_sync"), (ASYNC, "x_async")):
            if other in rates:
                ratios = [a / b for a, b in zip(rates[case], rates[other], strict=True)]
                row[key] = round(statistics.median(ratios), 2)
        if ASYNC in procs:
            row["pss_vs_async"] = round(row["pss_mb"] / max(procs[ASYNC].pss), 3)
        rows.append(row)
    return rows


def run(
    ns: Sequence[int] = DEFAULT_NS,
    delay_ms: float = 20.0,
    seconds: float = 1.0,
    rounds: int = 5,
    cases: Sequence[str] = CASES,
    in_process: bool = False,
) -> list[dict[str, Any]]:
    """Measure every case at every N against one server; one row per (case, N).

    Each row carries ``x_sync``/``x_async`` (throughput ratios) and
    ``pss_vs_async`` (memory ratio) against the cases at the same N. With
    ``in_process`` there is no server: every env hosts ``Latency`` itself.
    """
    rows: list[dict[str, Any]] = []
    if in_process:
        for n in ns:
            rows += _measure_n(n, IN_PROCESS, 0, delay_ms, seconds, rounds, cases)
    else:
        server, url = _start_server()
        try:
            for n in ns:
                rows += _measure_n(n, url, server.pid, delay_ms, seconds, rounds, cases)
        finally:
            server.terminate()
            server.wait(timeout=30)
    for row in rows:
        row["transport"] = IN_PROCESS if in_process else "http"
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as an aligned table, then the targets at N=32."""
    head = (f"{'N':>4} {'case':<15} {'env-steps/s':>11} {'x Sync':>7} {'x Async':>8} "
            f"{'client ms':>9} {'server ms':>9} {'peak RSS MB':>11} {'PSS MB':>8} "
            f"{'PSS x Async':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['num_envs']:>4} {r['case']:<15} {r['env_steps_per_s']:>11.1f} "
            f"{r.get('x_sync', float('nan')):>7.2f} {r.get('x_async', float('nan')):>8.2f} "
            f"{r['client_cpu_ms_per_env_step']:>9.3f} {r['server_cpu_ms_per_env_step']:>9.3f} "
            f"{r['peak_rss_mb']:>11.1f} "
            f"{r['pss_mb']:>8.1f} {r.get('pss_vs_async', float('nan')):>11.3f}"
        )
    target = next((r for r in rows if r["case"] == ORS and r["num_envs"] == 32), None)
    if target is not None:
        lines.append("targets at N=32 (OrsVectorEnv):")
        for label, key, ok in (
            (">= 20x SyncVectorEnv throughput", "x_sync", lambda v: v >= 20),
            (">= 2x AsyncVectorEnv throughput", "x_async", lambda v: v >= 2),
            ("< 1/4 of AsyncVectorEnv's memory (PSS)", "pss_vs_async", lambda v: v < 0.25),
        ):
            if key in target:
                verdict = "met" if ok(target[key]) else "MISSED"
                lines.append(f"  {label}: {target[key]:g} ({verdict})")
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Throughput and memory against N, one line per case (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for case in CASES:
        mine = [r for r in rows if r["case"] == case]
        if not mine:
            continue
        ns = [r["num_envs"] for r in mine]
        left.plot(ns, [r["env_steps_per_s"] for r in mine], marker="o", label=case)
        right.plot(ns, [r["pss_mb"] for r in mine], marker="o", label=case)
    for ax, title in ((left, "throughput (env-steps/s)"), (right, "memory, PSS (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("num_envs")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
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
    if argv[:1] == ["--child"]:
        case, n, url, delay_ms = argv[1:5]
        _child(case, int(n), url, float(delay_ms))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="N = 1, 8, 32 and 3 rounds")
    parser.add_argument("--ns", type=int, nargs="+", help="the N to measure (default 1 8 32 128)")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the tool's latency")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="length of one timed run of one case (default 1)")
    parser.add_argument("--rounds", type=int, help="timed runs per case (default 5)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--in-process", action="store_true",
                        help="no server: every env hosts Latency in its own process")
    parser.add_argument("--json", type=Path, default=RESULTS / "bench_vector.json",
                        help="where to write the rows")
    parser.add_argument("--plot", type=Path, default=RESULTS / "bench_vector.png",
                        help="where to draw the figure (needs matplotlib)")
    args = parser.parse_args(argv)
    ns = args.ns or ((1, 8, 32) if args.quick else DEFAULT_NS)
    rounds = args.rounds or (3 if args.quick else 5)
    rows = run(ns=ns, delay_ms=args.delay_ms, seconds=args.seconds, rounds=rounds,
               cases=args.cases, in_process=args.in_process)
    print(format_table(rows))
    print(f"tool: Latency.wait() sleeping {args.delay_ms:g} ms; {os.cpu_count()} CPUs; "
          "ratios against the cases at the same N in this run; client/server ms: CPU time "
          "per env-step (client: the stepping process only, not AsyncVectorEnv's workers)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))
    try:
        plot(rows, args.plot)
    except ImportError:
        print("matplotlib is not installed: no figure drawn")


if __name__ == "__main__":
    main()
