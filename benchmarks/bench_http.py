"""HTTP step latency: ors_gym vs the reference SDK's client vs a bare httpx + httpx-sse floor.

One SDK server runs the test environment ``Echo`` environment in its own process
(``python -m ors_gym serve echo --port 0``, so it does not share the client's
GIL). Every case makes the same tool call, ``echo(text="hello")``, on one open
session, one call after another:

- ``httpx + httpx-sse (floor)``: a bare loop posting ``/echo/call`` on one
  pooled connection, reading the SSE stream and parsing the JSON; what any
  HTTP client must spend.
- ``OrsEnv.step (HTTP)``: a whole Gym step (action parsing, the call,
  observation building) over ``AsyncHttpBackend``, on its runtime.
- ``OrsEnv.step (httpx transport)``: the same step over an ``HttpBackend``
  that sends through httpx's own ``httpx.AsyncHTTPTransport`` instead of
  ``ors_gym``'s pool, to weigh the two in one run;
- ``openreward SDK call_tool``: the reference SDK's own session client
  (``AsyncOpenReward(...).environments.get("echo").session(...).call_tool``,
  aiohttp), driven by one event loop.

Each step is timed on its own, and the client process's CPU time per step is
counted (``CPU us``: the server runs in its own process); cases run in
batches of about ``batch_ms``, interleaved round by round in rotating order.
Reported: median and p99 per step over all rounds, and the ratio to the
floor (the median over rounds of the per-round median ratios). Targets: ``OrsEnv.step`` <= 1.15x the
floor and faster than the SDK client.

Run: ``python -m benchmarks.bench_http`` (``--quick`` for fewer rounds,
``--json PATH`` to save the rows, ``--baseline REF`` to run the same benchmark
over a git ref's tree afterwards and compare the ratios to the floor).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    Steps,
    bare_sse_call,
    cpu_counted,
    flat,
    interleave,
    percentile,
    round_ratio,
    row,
    served,
    write_json,
)
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

ENV = "echo"
TOOL = "echo"
ARGS: dict[str, Any] = {"text": "hello"}
FLOOR = "httpx + httpx-sse (floor)"
ORS = "OrsEnv.step (HTTP)"
ORS_HTTPX = "OrsEnv.step (httpx transport)"
SDK = "openreward SDK call_tool"
TARGET_VS_FLOOR = 1.15


def _task() -> dict[str, Any]:
    from ors_gym.envs.testing.echo import Echo

    return dict(Echo.list_tasks("train")[0])


@contextmanager
def floor_case(url: str, env: str = ENV, tool: str = TOOL,
               args: dict[str, Any] | None = None, task: dict[str, Any] | None = None
               ) -> Iterator[Steps]:
    """The bare client: one pooled httpx connection, SSE read, chunks joined, JSON parsed."""
    call = bare_sse_call(url, env, tool, ARGS if args is None else args, task or _task())
    with call as one:
        yield _timed_steps(one)


def _timed_steps(one: Callable[[], Any]) -> Steps:
    def steps(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            result = one()
            out.append(time.perf_counter() - t)
        assert result["ok"], result
        return out

    return steps


@contextmanager
def orsenv_case(url: str | None = None, env: str = ENV, tool: str = TOOL,
                args: dict[str, Any] | None = None, env_class: str | None = None,
                httpx_transport: bool = False) -> Iterator[Steps]:
    """A whole Gym step: ``OrsEnv(url, env)`` over HTTP (through httpx's own transport
    with ``httpx_transport``), or ``OrsEnv(env_class=...)``."""
    from ors_gym.env import OrsEnv

    if httpx_transport:
        import httpx

        from ors_gym.backends.http import HttpBackend

        backend: Any = HttpBackend(url, transport=httpx.AsyncHTTPTransport())
        gym_env = OrsEnv(env_name=env, backend=backend, split="train")
    else:
        backend = None
        gym_env = (OrsEnv(env_class=env_class, split="train") if env_class
                   else OrsEnv(url, env, split="train"))
    gym_env.reset(seed=0)
    action = {"tool_calls": [{"name": tool, "arguments": ARGS if args is None else args}]}

    def steps(n: int) -> list[float]:
        step = gym_env.step
        out = []
        for _ in range(n):
            t = time.perf_counter()
            _, _, terminated, truncated, info = step(action)
            out.append(time.perf_counter() - t)
        assert not (terminated or truncated), info
        return out

    try:
        yield steps
    finally:
        gym_env.close()
        if backend is not None:
            backend.close()


@contextmanager
def sdk_case(url: str) -> Iterator[Steps]:
    """The reference SDK's session client (aiohttp), on one event loop."""
    os.environ["OPENREWARD_SESSION_URL"] = url
    from openreward import AsyncOpenReward

    loop = asyncio.new_event_loop()
    client = AsyncOpenReward(api_key="x", base_url=url)

    async def open_session() -> Any:  # aiohttp's connector needs a running loop
        session = client.environments.get(ENV).session(split="train", index=0)
        await session.__aenter__()
        return session

    session = loop.run_until_complete(open_session())

    async def calls(n: int) -> list[float]:
        out = []
        call = session.call_tool
        for _ in range(n):
            t = time.perf_counter()
            result = await call(TOOL, ARGS)
            out.append(time.perf_counter() - t)
        assert not result.finished, result
        return out

    try:
        yield lambda n: loop.run_until_complete(calls(n))
    finally:
        loop.run_until_complete(session.__aexit__(None, None, None))
        loop.run_until_complete(client.environments.aclose())
        loop.close()


def run(rounds: int = 15, batch_ms: float = 100.0, include_sdk: bool = True
        ) -> list[dict[str, Any]]:
    """Time every case; one row per case (median/p99 us per step, ratio to the floor)."""
    with ExitStack() as stack:
        url = stack.enter_context(served([TEST_ENVS["Echo"]]))
        cases: dict[str, Steps] = {
            FLOOR: stack.enter_context(floor_case(url)),
            ORS: stack.enter_context(orsenv_case(url)),
            ORS_HTTPX: stack.enter_context(orsenv_case(url, httpx_transport=True)),
        }
        if include_sdk:
            cases[SDK] = stack.enter_context(sdk_case(url))
        cpu = {name: [0.0, 0] for name in cases}
        times = interleave({name: cpu_counted(steps, cpu[name]) for name, steps in
                            cases.items()}, rounds, batch_ms / 1000)
    base = flat(times[FLOOR])
    base_med, base_p99 = statistics.median(base), percentile(base, 99)
    rows = []
    for name, per_round in times.items():
        steps = flat(per_round)
        med, p99 = statistics.median(steps), percentile(steps, 99)
        rows.append(row(
            "http", name, med * 1e6, base_med * 1e6, round_ratio(per_round, times[FLOOR]),
            "us/step", FLOOR,
            p99_us=round(p99 * 1e6, 1), floor_p99_us=round(base_p99 * 1e6, 1),
            p99_ratio=round(p99 / base_p99, 3), steps=len(steps), rounds=rounds,
            cpu_us=round(1e6 * cpu[name][0] / cpu[name][1], 1),
        ))
    return rows



def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """The targets, each met or MISSED."""
    by = {r["case"]: r for r in rows}
    out = []
    if ORS in by:
        ratio = by[ORS]["ratio"]
        out.append(f"target: OrsEnv.step (HTTP) <= {TARGET_VS_FLOOR}x the bare floor: "
                   f"{ratio:.2f}x ({'met' if ratio <= TARGET_VS_FLOOR else 'MISSED'})")
        if SDK in by:
            speed = by[SDK]["ratio"] / ratio
            out.append(f"target: OrsEnv.step faster than the SDK client: {speed:.2f}x as fast "
                       f"({'met' if speed > 1 else 'MISSED'})")
    return out


def format_table(rows: list[dict[str, Any]]) -> str:
    """Median and p99 per step, ratios to the floor, then the targets."""
    lines = [f"{'case':<30} {'median us':>10} {'p99 us':>10} {'x floor':>8} "
             f"{'p99 x floor':>12} {'CPU us':>8}"]
    for r in rows:
        lines.append(f"{r['case']:<30} {r['ors_gym']:>10.1f} {r['p99_us']:>10.1f} "
                     f"{r['ratio']:>8.3f} {r['p99_ratio']:>12.3f} {r.get('cpu_us', 0):>8.1f}")
    return "\n".join(lines + verdicts(rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 15")
    parser.add_argument("--no-sdk", action="store_true", help="skip the SDK client case")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--baseline", metavar="REF",
                        help="also run this benchmark over a git ref's tree (e.g. main) and "
                             "compare the ratios to the floor")
    args = parser.parse_args(argv)
    rows = run(rounds=5 if args.quick else 15, include_sdk=not args.no_sdk)
    print(format_table(rows))
    print(f"tool: Echo.{TOOL}({ARGS}); server in its own process on 127.0.0.1")
    if args.baseline:
        from benchmarks._baseline import with_baseline

        same = [*(["--quick"] if args.quick else []), *(["--no-sdk"] if args.no_sdk else [])]
        rows = with_baseline("bench_http", rows, args.baseline, same,
                             [("ratio", "x floor"), ("p99_ratio", "p99 x floor")])
    if args.json:
        write_json(rows, args.json)


if __name__ == "__main__":
    main()
