"""1,000 sessions from one process: client memory, step latency and CPU, against 4 servers.

Four SDK server processes (``python -m ors_gym serve ors_gym.envs.testing.latency:Latency
--port 0``) host the test environment ``Latency``, whose ``wait`` tool sleeps
``--delay-ms`` on the server. One client process opens ``--n`` sessions (1,000) across
them, round-robin, in each of two ways, each case in its own fresh process:

- ``vector``: ``OrsVectorEnv(n, base_url=[4 urls])``, stepped envpool-style: every
  sub-env is sent an action, and each one ``recv`` returns is sent its next one;
- ``async``: ``n`` ``AsyncOrsEnv`` episodes under ``asyncio.run``, over one
  ``AsyncHttpBackend`` per server sharing one pooled client.

Reported per case: client memory per session (RSS of the client process after
opening and stepping the sessions, minus its RSS just before, over n; target
<= 100 KB), p50/p99 latency of one sub-env step (from its send to its result:
``info["env_id"]`` of ``recv``, or timed inside the async episode) as ratios to
the tool's own latency ``delay_ms`` (the baseline, 1.0 at best), client CPU ms per
env-step (the client process's CPU time over the timed steps), and errors (steps
that raised, truncated or answered a wrong ``waited k``; must be 0).

The delay is long (default 2,000 ms) on purpose: n sessions step n / delay
times per second, and the servers spend CPU on every step, so a short delay
measures server CPU, not latency, on a small machine.

Run: ``python -m benchmarks.bench_scale`` (``--n``, ``--servers``, ``--delay-ms``,
``--rounds`` steps per session, ``--json PATH``). Exits 1 on any error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

if __package__ in (None, ""):  # run as a file: make `ors_gym` and `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, child_env, percentile, write_json
from ors_gym.envs.testing import TEST_ENVS

WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}
CASES = ("vector", "async")


# -- server processes ----------------------------------------------------------------------------


class ServerProcess:
    """``python -m ors_gym serve SPECS`` in a child process; can be killed and started again
    on the same port (a server restarted mid-run)."""

    def __init__(self, specs: Sequence[str], port: int = 0, *, wait: bool = True) -> None:
        self.specs = list(specs)
        self.port = port
        self.proc: subprocess.Popen[str] | None = None
        self.launch()
        if wait:
            self.wait_bound()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Serve (again) on ``self.port``; return once the server is bound."""
        self.launch()
        self.wait_bound()

    def launch(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ors_gym", "serve", *self.specs, "--host", "127.0.0.1",
             "--port", str(self.port)],
            stdout=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT,
        )

    def wait_bound(self) -> None:
        """Wait for the server's "serving ... at URL" line; learn its port."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        line = proc.stdout.readline()  # "ors-gym: serving NAMES at http://HOST:PORT"
        if " at http" not in line:
            proc.kill()
            self.proc = None
            raise RuntimeError(f"the ORS server did not start (exit {proc.wait()}): {line!r}")
        self.port = int(line.strip().rsplit(":", 1)[1])
        # Keep reading what it prints: a full pipe would block the server on its next line.
        threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()

    def kill(self) -> None:
        """SIGKILL: the server dies with its sessions, no goodbye on any connection."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    @property
    def cpu_s(self) -> float:
        """CPU seconds the server process has used so far."""
        if self.proc is None:
            return 0.0
        return _cpu_s(self.proc.pid)


def _drain(stream: IO[str]) -> None:
    for _ in stream:
        pass


def start_servers(specs: Sequence[str], count: int) -> list[ServerProcess]:
    """``count`` server processes of ``specs`` on free ports, started side by side."""
    servers: list[ServerProcess] = []
    try:
        for _ in range(count):
            servers.append(ServerProcess(specs, wait=False))
        for server in servers:
            server.wait_bound()
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb() -> int:
    """This process's resident set size, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- the measured client (a child process per case) ----------------------------------------------


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _check(text: str, expected: int) -> bool:
    return text == f"waited {expected}"


def _servers_cpu_s() -> float:
    return sum(_cpu_s(pid) for pid in _SERVER_PIDS)


_SERVER_PIDS: list[int] = []  # the servers' processes, read from /proc by the child


def _vector_case(urls: list[str], n: int, task: dict[str, Any], rounds: int) -> dict[str, Any]:
    import numpy as np

    from ors_gym.vector import OrsVectorEnv

    before = rss_kb()
    env = OrsVectorEnv(n, base_url=urls, env_name="latency",
                       backend_options={"keepalive_interval": None})
    errors: list[str] = []
    try:
        t = time.perf_counter()
        env.reset(seed=0, options={"task_spec": task})
        _note(f"vector: {n} sessions open in {time.perf_counter() - t:.1f} s")
        _, _, _, truncated, info = env.step((WAIT,) * n)  # every session has made a call
        if truncated.any():
            errors += [str(info["error"][i]) for i in truncated.nonzero()[0][:5]]
        after = rss_kb()
        counts = np.ones(n, dtype=np.int64)  # calls each session has answered
        latencies: list[float] = []
        wrong = 0
        sent = [time.perf_counter()] * n
        env.send((WAIT,) * n)
        cpu0, t0, server0 = time.process_time(), time.perf_counter(), _servers_cpu_s()
        finished = 0
        while finished < n * rounds:
            obs, _, _, truncated, info = env.recv()
            now = time.perf_counter()
            ids = [int(i) for i in info["env_id"]]
            for pos, i in enumerate(ids):
                latencies.append(now - sent[i])
                counts[i] += 1
                if truncated[pos] or not _check(obs["text"][pos], int(counts[i])):
                    wrong += 1
                    if len(errors) < 5:
                        errors.append(f"sub-env {i}: {obs['text'][pos]!r}")
                sent[i] = now
            finished += len(ids)
            env.send((WAIT,) * len(ids), env_ids=ids)
        cpu, seconds = time.process_time() - cpu0, time.perf_counter() - t0
        server = _servers_cpu_s() - server0
        env.recv(min_envs=len(env.in_flight))
    finally:
        env.close()
    return _summary(n, before, after, latencies, cpu, seconds, wrong, errors, server)


def _async_case(urls: list[str], n: int, task: dict[str, Any], rounds: int) -> dict[str, Any]:
    from ors_gym import AsyncOrsEnv
    from ors_gym.backends.http import AsyncHttpBackend, pooled_transport

    async def main() -> dict[str, Any]:
        before = rss_kb()
        client = pooled_transport(None, n + 4)
        backends = [AsyncHttpBackend(u, transport=client, keepalive_interval=None) for u in urls]
        envs = [AsyncOrsEnv(backend=backends[i % len(urls)], env_name="latency")
                for i in range(n)]
        latencies: list[float] = []
        errors: list[str] = []
        wrong = 0
        opened = asyncio.Event()
        ready = 0
        go = asyncio.Event()

        async def episode(env: AsyncOrsEnv) -> None:
            nonlocal ready, wrong
            await env.reset(options={"task_spec": task})
            await env.step(WAIT)
            ready += 1
            if ready == n:
                opened.set()
            await go.wait()
            for k in range(2, rounds + 2):
                start = time.perf_counter()
                obs, _, _, truncated, _ = await env.step(WAIT)
                latencies.append(time.perf_counter() - start)
                if truncated or not _check(obs["text"], k):
                    wrong += 1
                    if len(errors) < 5:
                        errors.append(repr(obs["text"]))

        tasks = [asyncio.create_task(episode(e)) for e in envs]
        waiter = asyncio.create_task(opened.wait())
        await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
        if not opened.is_set():  # an episode failed before every session was open
            await asyncio.gather(*tasks)
        after = rss_kb()
        cpu0, t0, server0 = time.process_time(), time.perf_counter(), _servers_cpu_s()
        go.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        cpu, seconds = time.process_time() - cpu0, time.perf_counter() - t0
        server = _servers_cpu_s() - server0
        failed = [r for r in results if isinstance(r, BaseException)]
        errors += [f"{type(e).__name__}: {e}" for e in failed][:5]
        await asyncio.gather(*(e.close() for e in envs))
        await asyncio.gather(*(b.aclose() for b in backends))
        await client.aclose()
        return _summary(n, before, after, latencies, cpu, seconds, wrong + len(failed), errors,
                        server)

    return asyncio.run(main())


def _summary(n: int, before: int, after: int, latencies: list[float], cpu: float,
             seconds: float, wrong: int, errors: list[str], server_cpu: float
             ) -> dict[str, Any]:
    steps = len(latencies)
    return {
        "sessions": n,
        "kb_per_session": round((after - before) / n, 1),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1) if steps else None,
        "p99_ms": round(percentile(latencies, 99) * 1000, 1) if steps else None,
        "steps": steps,
        "steps_per_s": round(steps / seconds, 1),
        "cpu_ms_per_step": round(cpu * 1000 / max(steps, 1), 3),
        "server_cpu_ms_per_step": round(server_cpu * 1000 / max(steps, 1), 3),
        "errors": wrong,
        "error_samples": errors,
    }


def _child(case: str, urls: list[str], n: int, delay_ms: float, rounds: int,
           pids: list[int]) -> None:
    from ors_gym.serving import quiet_sdk_logging

    _SERVER_PIDS[:] = pids
    quiet_sdk_logging()
    task = {"delay_ms": delay_ms, "length": 10_000_000}
    run = _vector_case if case == "vector" else _async_case
    print(json.dumps(run(urls, n, task, rounds)), flush=True)


# -- the parent ----------------------------------------------------------------------------------


def _run_case(case: str, urls: list[str], n: int, delay_ms: float, rounds: int,
              servers: Sequence[ServerProcess]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench_scale", "--child", case, "--n", str(n),
           "--delay-ms", str(delay_ms), "--rounds", str(rounds), "--urls", *urls,
           "--pids", *(str(s.proc.pid) for s in servers if s.proc is not None)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=ROOT,
                         timeout=3600)
    if out.returncode != 0:
        with tempfile.NamedTemporaryFile("w", prefix=f"bench_scale-{case}-", suffix=".log",
                                         delete=False) as log:
            log.write(out.stderr)
        raise RuntimeError(f"case {case} failed (exit {out.returncode}; its whole stderr is in "
                           f"{log.name}):\n{out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    offered = n * 1000 / delay_ms  # steps/s if every step took exactly delay_ms
    return {"benchmark": "scale", "case": case, "delay_ms": delay_ms, **row,
            "p50_x_delay": round(row["p50_ms"] / delay_ms, 3),
            "p99_x_delay": round(row["p99_ms"] / delay_ms, 3),
            "x_offered": round(row["steps_per_s"] / offered, 3)}


def run(n: int = 1000, servers: int = 4, delay_ms: float = 2000.0, rounds: int = 5
        ) -> list[dict[str, Any]]:
    """Both cases against the same ``servers`` server processes; one row per case."""
    procs = start_servers([TEST_ENVS["Latency"]], servers)
    try:
        urls = [p.url for p in procs]
        return [_run_case(case, urls, n, delay_ms, rounds, procs) for case in CASES]
    finally:
        for p in procs:
            p.stop()


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'case':<8} {'sessions':>8} {'KB/session':>10} {'p50 x delay':>11} "
             f"{'p99 x delay':>11} {'CPU ms/step':>11} {'server ms/step':>14} {'steps/s':>8} "
             f"{'x offered':>9} {'errors':>6}"]
    for r in rows:
        lines.append(
            f"{r['case']:<8} {r['sessions']:>8} {r['kb_per_session']:>10.1f} "
            f"{r['p50_x_delay']:>11.3f} {r['p99_x_delay']:>11.3f} "
            f"{r['cpu_ms_per_step']:>11.3f} {r['server_cpu_ms_per_step']:>14.3f} "
            f"{r['steps_per_s']:>8.1f} {r['x_offered']:>9.3f} {r['errors']:>6}"
        )
    for r in rows:
        for error in r["error_samples"]:
            lines.append(f"  {r['case']}: {error}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=1000, help="sessions (default 1,000)")
    parser.add_argument("--servers", type=int, default=4, help="server processes (default 4)")
    parser.add_argument("--delay-ms", type=float, default=2000.0,
                        help="the tool's own latency, the baseline (default 2,000)")
    parser.add_argument("--rounds", type=int, default=5, help="timed steps per session")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--urls", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--pids", nargs="*", type=int, default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _child(args.child, args.urls, args.n, args.delay_ms, args.rounds, args.pids)
        return 0
    rows = run(args.n, args.servers, args.delay_ms, args.rounds)
    print(format_table(rows))
    print(f"{args.n} sessions over {args.servers} server processes; latency of one sub-env "
          f"step as a ratio to the tool's own {args.delay_ms:g} ms (1.0 at best); KB/session: "
          "client RSS growth over the sessions (target <= 100); CPU / server ms/step: client "
          "and all servers' CPU per env-step; x offered: steps/s over n / delay (1.0 when "
          "nothing queues); errors must be 0")
    if args.json:
        write_json(rows, args.json)
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
