"""Shared helpers for the newer benchmarks: a served subprocess, interleaved timing, tables.

Every figure here is measured against a baseline timed in the same run,
interleaved round by round, so load from elsewhere on a shared machine hits
both sides alike; speed claims are ratios, never absolute numbers.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"

#: A case: runs ``n`` steps, returns the seconds each one took.
Steps = Callable[[int], list[float]]


def cpu_counted(steps: Steps, total: list[Any]) -> Steps:
    """``steps``, adding the client process's CPU time and the step count to ``total``
    (a server in its own process is not counted: this is the client's CPU alone)."""
    def counted(n: int) -> list[float]:
        started = time.process_time()
        out = steps(n)
        total[0] += time.process_time() - started
        total[1] += len(out)
        return out

    return counted


def child_env(extra_path: Sequence[str] = ()) -> dict[str, str]:
    """The environment for a child process: the repo importable, the SDK quiet."""
    env = dict(os.environ)
    env.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    env.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [*extra_path, str(ROOT), env.get("PYTHONPATH")])
    )
    return env


@contextmanager
def served(specs: Sequence[str], extra_path: Sequence[str] = ()) -> Iterator[str]:
    """``python -m ors_gym serve SPECS --port 0`` in a child process; yields its URL.

    A separate process so the server does not share the client's GIL.
    """
    with served_process(specs, extra_path) as (_, url):
        yield url


@contextmanager
def served_process(specs: Sequence[str], extra_path: Sequence[str] = ()
                   ) -> Iterator[tuple[int, str]]:
    """As ``served``, yielding the server's pid too (to read its CPU time)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ors_gym", "serve", *specs, "--port", "0", "--host", "127.0.0.1"],
        stdout=subprocess.PIPE, text=True, env=child_env(extra_path), cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "ors-gym: serving NAMES at http://HOST:PORT"
        if " at http" not in line:
            raise RuntimeError(f"the ORS server did not start (exit {proc.poll()}): {line!r}")
        yield proc.pid, line.strip().rsplit(" ", 1)[1]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def bare_sse_call(
    url: str, env: str, tool: str, args: Mapping[str, Any], task: Mapping[str, Any]
) -> Iterator[Callable[[], Any]]:
    """The HTTP floor: yields ``one()``, a single tool call made the plainest way.

    One pooled httpx connection, one session, the SSE stream read with httpx-sse,
    chunks joined and the JSON parsed; the session is deleted at exit.
    """
    import uuid

    import httpx
    from httpx_sse import connect_sse

    client = httpx.Client(base_url=url, timeout=60)
    headers = {"X-Session-ID": str(uuid.uuid4())}
    client.post(
        "/create", json={"env_name": env, "task_spec": dict(task)}, headers=headers
    ).raise_for_status()
    body = {"name": tool, "input": dict(args), "task_id": None}
    path = f"/{env}/call"

    def one() -> Any:
        parts: list[str] = []
        with connect_sse(client, "POST", path, json=body, headers=headers) as source:
            for event in source.iter_sse():
                if event.event == "error":
                    raise RuntimeError(event.data)
                if event.event in ("chunk", "end"):
                    parts.append(event.data)
                    if event.event == "end":
                        break
        return json.loads("".join(parts))

    try:
        yield one
    finally:
        client.post("/delete", headers=headers)
        client.close()


def batch_size(steps: Steps, batch_seconds: float, minimum: int = 3) -> int:
    """Steps per batch so one batch takes about ``batch_seconds`` (after a warm-up)."""
    steps(2)  # warm up: imports, caches, connections
    once = max(statistics.median(steps(3)), 1e-7)
    return max(minimum, int(batch_seconds / once))


def interleave(
    cases: Mapping[str, Steps], rounds: int, batch_seconds: float, minimum: int = 3
) -> dict[str, list[list[float]]]:
    """Per case, per round, the per-step seconds; case order rotates each round.

    The garbage collector runs between batches, never inside one.
    """
    sizes = {name: batch_size(fn, batch_seconds, minimum) for name, fn in cases.items()}
    names = list(cases)
    times: dict[str, list[list[float]]] = {name: [] for name in names}
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                times[name].append(cases[name](sizes[name]))
            gc.collect()
    finally:
        if was_enabled:
            gc.enable()
    return times


def flat(rounds: Sequence[Sequence[float]]) -> list[float]:
    """All steps of all rounds in one list."""
    return [t for batch in rounds for t in batch]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def round_ratio(ours: Sequence[Sequence[float]], base: Sequence[Sequence[float]]) -> float:
    """Median over rounds of (median step of ours / median step of the baseline)."""
    return statistics.median(
        statistics.median(o) / statistics.median(b) for o, b in zip(ours, base, strict=True)
    )


def row(
    benchmark: str, case: str, ours: float, baseline: float | None, ratio: float | None,
    unit: str, baseline_name: str, **extra: Any,
) -> dict[str, Any]:
    """One result row in the shape every table and chart here reads."""
    return {
        "benchmark": benchmark,
        "case": case,
        "ors_gym": round(ours, 1),
        "baseline": None if baseline is None else round(baseline, 1),
        "baseline_name": baseline_name,
        "unit": unit,
        "ratio": None if ratio is None else round(ratio, 3),
        **extra,
    }


def format_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """An aligned table: benchmark, case, ors_gym figure, baseline figure, ratio, baseline."""
    head = (f"{'benchmark':<10} {'case':<38} {'ors_gym':>11} {'baseline':>11} {'ratio':>7} "
            f"{'unit':<9} baseline")
    lines = [head, "-" * len(head)]
    for r in rows:
        base = r.get("baseline")
        ratio = r.get("ratio")
        lines.append(
            f"{r['benchmark']:<10} {r['case'][:38]:<38} {r['ors_gym']:>11.1f} "
            f"{'-' if base is None else format(base, '.1f'):>11} "
            f"{'-' if ratio is None else format(ratio, '.3f'):>7} {r.get('unit', ''):<9} "
            f"{r.get('baseline_name', '')}"
        )
    return "\n".join(lines)


def write_json(rows: Any, path: Path) -> None:
    """Write ``rows`` as indented JSON, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=2) + "\n")
