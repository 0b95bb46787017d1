"""In-process tool calls vs the SDK's own dispatch and vs HTTP, measured in one run.

Every case makes the same call, the test environment ``Echo`` environment's
``echo(text="hello")`` (an async tool), on one open episode:

- ``SDK dispatch (floor)``: ``await call_session_tool(env, None, ...)`` in a
  loop on one event loop, the instance built directly; what any in-process
  host using the SDK's dispatch as it is must spend (the SDK's logging at
  WARNING, as everywhere here). It re-introspects the tool on every call.
- ``SDK dispatch, introspection cached``: the same loop with the cache
  ``LocalBackend`` puts on that introspection (``ors_gym/_compat/openreward.py``);
  the work left that no host can skip, so the rows below it show ors_gym's own
  overhead.
- ``LocalBackend.call``: ``ors_gym.backends.local`` per call, from plain code.
- ``OrsEnv.step (in-process)``: a whole Gym step (action parsing, the call,
  observation building) over ``AsyncLocalBackend``, on its runtime.
- ``HTTP floor (httpx + httpx-sse)``: a bare SSE client loop against the SDK
  server on 127.0.0.1 (``ServerThread``); what any HTTP client must spend.
- ``HttpBackend.call``: ``ors_gym.backends.http`` against the same server.

Cases run in batches sized to about ``--batch-ms`` each, interleaved round by
round in rotating order; each figure is the median over rounds, each ratio the
median of the per-round ratios to the floor measured in the same round. The
in-process rows also get the ratio of the calling thread's CPU time, which is
all of their work (the tool is async) and which other load on a shared machine
does not inflate as it does wall-clock time.
Targets: an in-process step <= 1.5x the floor, and >= 10x faster than HTTP.

Run: ``python -m benchmarks.bench_inprocess`` (``--quick`` for fewer rounds,
``--json PATH`` to save the rows, ``--baseline REF`` to run the same benchmark
over a git ref's tree afterwards and compare the ratios to the floor).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `ors_gym` importable from the repo
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

ECHO = "ors_gym.envs.testing.echo:Echo"
TOOL = "echo"
ARGS: dict[str, Any] = {"text": "hello"}

FLOOR = "SDK dispatch (floor)"
CACHED = "SDK dispatch, introspection cached"
LOCAL = "LocalBackend.call"
STEP = "OrsEnv.step (in-process)"
HTTP_FLOOR = "HTTP floor (httpx + httpx-sse)"
HTTP_BACKEND = "HttpBackend.call"

#: A case: a callable running ``n`` calls, returning the wall-clock and the calling
#: thread's CPU seconds they took.
Batch = Callable[[int], tuple[float, float]]


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    return time.perf_counter() - start[0], time.thread_time() - start[1]


def _task() -> dict[str, Any]:
    from ors_gym.envs.testing.echo import Echo

    return dict(Echo.list_tasks("train")[0])


# -- the cases -----------------------------------------------------------------------------------


@contextmanager
def _sdk_floor(cached: bool = False) -> Iterator[Batch]:
    """The SDK's own dispatch, awaited back to back on one event loop.

    ``cached``: with ``LocalBackend``'s cache of the SDK's per-call tool
    introspection switched on for the loop's Task (and only there).
    """
    from openreward.environments.session import call_session_tool

    from ors_gym._compat.openreward import enable_introspection_cache
    from ors_gym.backends.local.sdk import load_sdk as _load_sdk
    from ors_gym.envs.testing.echo import Echo

    _load_sdk()  # installs the hook, as constructing a LocalBackend does
    env = Echo(task_spec=_task(), secrets={})
    env.setup()
    loop = asyncio.new_event_loop()

    async def calls(n: int) -> tuple[float, float]:
        if cached:
            enable_introspection_cache()  # this Task's context only
        start = _clock()
        for _ in range(n):
            result = await call_session_tool(env, None, TOOL, ARGS)
        elapsed = _since(start)
        assert result.root.ok, result
        return elapsed

    try:
        yield lambda n: loop.run_until_complete(calls(n))
    finally:
        loop.close()


@contextmanager
def _local_call() -> Iterator[Batch]:
    from ors_gym.backends.local import LocalBackend

    backend = LocalBackend(ECHO)
    sid = backend.create_session("echo", task_spec=_task())

    def calls(n: int) -> tuple[float, float]:
        call = backend.call
        start = _clock()
        for _ in range(n):
            result = call("echo", sid, TOOL, ARGS)
        elapsed = _since(start)
        assert result.ok, result
        return elapsed

    try:
        yield calls
    finally:
        backend.close()


@contextmanager
def _orsenv_step() -> Iterator[Batch]:
    """A full Gym step in-process: ``OrsEnv(env_class=...)`` over LocalBackend."""
    from ors_gym.env import OrsEnv

    env = OrsEnv(env_class=ECHO, split="train")
    env.reset(seed=0)
    action = {"tool_calls": [{"name": TOOL, "arguments": ARGS}]}

    def steps(n: int) -> tuple[float, float]:
        step = env.step
        start = _clock()
        for _ in range(n):
            _, _, terminated, truncated, _ = step(action)
        elapsed = _since(start)
        assert not (terminated or truncated)
        return elapsed

    try:
        yield steps
    finally:
        env.close()


@contextmanager
def _http_floor(url: str) -> Iterator[Batch]:
    """The bare HTTP client: one pooled connection, SSE read, JSON parse."""
    from benchmarks._common import bare_sse_call

    with bare_sse_call(url, "echo", TOOL, ARGS, _task()) as one:
        yield _timed_calls(one)


def _timed_calls(one: Callable[[], Any]) -> Batch:
    def calls(n: int) -> tuple[float, float]:
        start = _clock()
        for _ in range(n):
            result = one()
        elapsed = _since(start)
        assert result["ok"], result
        return elapsed

    return calls


@contextmanager
def _http_backend(url: str) -> Iterator[Batch]:
    from ors_gym.backends.http import HttpBackend

    backend = HttpBackend(url, keepalive_interval=None)
    sid = backend.create_session("echo", task_spec=_task())

    def calls(n: int) -> tuple[float, float]:
        start = _clock()
        for _ in range(n):
            result = backend.call("echo", sid, TOOL, ARGS)
        elapsed = _since(start)
        assert result.ok, result
        return elapsed

    try:
        yield calls
    finally:
        backend.close()


# -- measuring ---------------------------------------------------------------------------------


def _batch_size(batch: Batch, batch_seconds: float) -> int:
    batch(3)  # warm up: imports, caches, connections
    once = max(batch(5)[0] / 5, 1e-7)
    return max(5, int(batch_seconds / once))


def run(
    rounds: int = 15, batch_ms: float = 60.0, include_http: bool = True
) -> list[dict[str, Any]]:
    """Time every case; rows of ``case, us_per_call, ratio_vs_floor, calls_per_batch``."""
    from ors_gym.serving import ServerThread

    with ExitStack() as stack:
        cases: dict[str, Batch] = {
            FLOOR: stack.enter_context(_sdk_floor()),
            CACHED: stack.enter_context(_sdk_floor(cached=True)),
            LOCAL: stack.enter_context(_local_call()),
            STEP: stack.enter_context(_orsenv_step()),
        }
        if include_http:
            server = stack.enter_context(ServerThread([ECHO]))
            cases[HTTP_FLOOR] = stack.enter_context(_http_floor(server.url))
            cases[HTTP_BACKEND] = stack.enter_context(_http_backend(server.url))
        sizes = {name: _batch_size(batch, batch_ms / 1000) for name, batch in cases.items()}
        names = list(cases)
        wall: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for r in range(rounds):
                order = names[r % len(names):] + names[: r % len(names)]
                for name in order:
                    seconds, cpu_seconds = cases[name](sizes[name])
                    wall[name].append(seconds / sizes[name])
                    cpu[name].append(cpu_seconds / sizes[name])
                gc.collect()
        finally:
            if gc_was_enabled:
                gc.enable()

    rows = []
    for name in names:
        ratios = [t / f for t, f in zip(wall[name], wall[FLOOR], strict=True)]
        # Thread CPU time counts all the work only where it all runs in the calling
        # thread: the in-process cases (an async tool); the HTTP server is another thread.
        cpu_ratios = [t / f for t, f in zip(cpu[name], cpu[FLOOR], strict=True)]
        in_process = name in (FLOOR, CACHED, LOCAL, STEP)
        rows.append(
            {
                "benchmark": "inprocess",
                "case": name,
                "us_per_call": round(statistics.median(wall[name]) * 1e6, 1),
                "ratio_vs_floor": round(statistics.median(ratios), 2),
                "cpu_ratio_vs_floor": round(statistics.median(cpu_ratios), 2)
                if in_process else None,
                "calls_per_batch": sizes[name],
                "rounds": rounds,
            }
        )
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table, then the targets."""
    lines = [f"{'case':<36} {'us/call':>10} {'x floor':>9} {'x floor (cpu)':>14}"]
    for r in rows:
        cpu = r.get("cpu_ratio_vs_floor")
        lines.append(
            f"{r['case']:<36} {r['us_per_call']:>10.1f} {r['ratio_vs_floor']:>9.2f} "
            f"{'-' if cpu is None else format(cpu, '.2f'):>14}"
        )
    by_case = {r["case"]: r for r in rows}
    step = by_case.get(STEP)
    if step is not None:
        verdict = "met" if step["ratio_vs_floor"] <= 1.5 else "MISSED"
        lines.append(
            f"target: in-process step <= 1.5x the SDK floor: {step['ratio_vs_floor']:.2f}x "
            f"({verdict})"
        )
        cached = by_case.get(CACHED)
        if cached is not None:
            own = step["us_per_call"] / cached["us_per_call"]
            lines.append(
                f"ors_gym's own overhead: the step is {own:.2f}x the SDK dispatch with "
                "introspection cached (the work no host can skip)"
            )
        http = by_case.get(HTTP_FLOOR)
        if http is not None:
            speedup = http["ratio_vs_floor"] / step["ratio_vs_floor"]
            verdict = "met" if speedup >= 10 else "MISSED"
            lines.append(
                f"target: in-process step >= 10x faster than the HTTP floor: {speedup:.1f}x "
                f"({verdict})"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 15")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP cases")
    parser.add_argument("--batch-ms", type=float, default=60.0, help="target batch length")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--baseline", metavar="REF",
                        help="also run this benchmark over a git ref's tree (e.g. main) and "
                             "compare the ratios to the floor")
    args = parser.parse_args(argv)
    rows = run(
        rounds=5 if args.quick else 15, batch_ms=args.batch_ms, include_http=not args.no_http
    )
    print(format_table(rows))
    print(f"tool: Echo.{TOOL}({ARGS}); ratios are medians of per-round ratios to the floor;")
    print("x floor (cpu): the same from the calling thread's CPU time, which other load on the "
          "machine does not inflate (in-process cases only)")
    if args.baseline:
        from benchmarks._baseline import with_baseline

        same = [*(["--quick"] if args.quick else []), *(["--no-http"] if args.no_http else []),
                "--batch-ms", str(args.batch_ms)]
        rows = with_baseline("bench_inprocess", rows, args.baseline, same,
                             [("ratio_vs_floor", "x floor"), ("cpu_ratio_vs_floor", "x floor cpu")])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
