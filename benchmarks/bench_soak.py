"""Soak: many concurrent sessions stepping through a proxy that cuts tool-call streams.

``--sessions`` threads (32) each drive an ``OrsEnv`` on the test environment ``Latency``
environment (each ``wait`` call sleeps ``--delay-ms`` on the server, episodes
of ``--episode-length`` calls) until ``--steps`` steps (10,000) are done in
total. The server runs in its own process (``ors-gym serve`` of ``Latency``); the
clients reach it through a loopback TCP proxy (``tests/_hostile.FlakyProxy``)
that cuts every ``--cut-every``-th tool-call stream right after the server
acknowledged it, so each cut call must be resumed by its task id.

Every step is checked: ``wait`` answers ``waited k`` where k counts the calls
the server ran in that episode, so a step whose result went missing, or whose
tool ran twice after a resume, shows as a wrong k. Reported per run: steps
completed, steps lost (an error, a truncation, or a wrong k; must be 0),
resumed calls (cuts), and throughput; the faulty run's throughput is given as
a ratio to the same run without faults, measured in the same invocation.

``--mode vector`` runs the sessions (default 1,000 there) as ONE
``OrsVectorEnv`` instead of threads, stepped envpool-style (each sub-env
``recv`` returns is sent its next step; an episode's end autoresets it), so a
thousand sessions share one event loop, one pooled client and one proxy.

Run: ``python -m benchmarks.bench_soak`` (``--quick`` for 1,000 steps, ``--json
PATH`` to save the rows; ``--mode vector`` for 1,000 sessions in one
``OrsVectorEnv``). Exits 1 if any step was lost.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `ors_gym` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")

from ors_gym.env import OrsEnv
from ors_gym.envs.testing import TEST_ENVS
from tests._hostile import FlakyProxy

WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}


@contextmanager
def _server() -> Iterator[str]:
    """``ors-gym serve`` of ``Latency`` in a child process on a free port; yields its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ors_gym", "serve", TEST_ENVS["Latency"], "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENREWARD_DISABLE_UPDATE_CHECK": "1",
             "OPENREWARD_LOG_LEVEL": "WARNING"},
    )
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:  # the server prints "ors-gym: serving latency at URL" once bound
            if "serving" in line:
                url = line.rsplit(" ", 1)[-1].strip()
                break
        if not url:
            raise RuntimeError(f"the server exited with {proc.wait()} before printing its URL")
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=30)


@dataclass
class Tally:
    completed: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, completed: int, lost: int, errors: list[str]) -> None:
        with self.lock:
            self.completed += completed
            self.lost += lost
            self.errors.extend(errors[: max(0, 5 - len(self.errors))])


def _worker(url: str, steps: int, task: dict[str, Any], seed: int, tally: Tally) -> None:
    """Take ``steps`` steps, checking each ``waited k`` against the episode's own count."""
    completed = lost = 0
    errors: list[str] = []
    env = OrsEnv(base_url=url, env_name="latency",
                 backend_options={"max_retries": 6, "backoff": 0.02})
    try:
        env.reset(seed=seed, options={"task_spec": task})
        k = 0
        for _ in range(steps):
            try:
                obs, _, terminated, truncated, info = env.step(WAIT)
            except Exception as exc:  # a lost step: counted, then a new episode
                lost += 1
                errors.append(f"{type(exc).__name__}: {exc}")
                env.reset(options={"task_spec": task})
                k = 0
                continue
            k += 1
            if truncated or obs["text"] != f"waited {k}":
                lost += 1
                errors.append(f"step {k}: got {obs['text']!r}, {info.get('truncation_reason')}")
            else:
                completed += 1
            if terminated or truncated:
                env.reset(options={"task_spec": task})
                k = 0
    finally:
        env.close()
        tally.add(completed, lost, errors)


def vector_soak(url: str, steps: int, sessions: int, task: dict[str, Any], tally: Tally,
                env_name: str = "latency") -> None:
    """``steps`` steps over ``sessions`` sub-envs of one ``OrsVectorEnv``, each checked
    (``env_name``'s ``wait`` answers ``waited k``)."""
    from ors_gym.vector import OrsVectorEnv

    env = OrsVectorEnv(sessions, base_url=url, env_name=env_name,
                       backend_options={"max_retries": 6, "backoff": 0.02})
    completed = lost = 0
    errors: list[str] = []
    try:
        env.reset(seed=0, options={"task_spec": task})
        calls = [0] * sessions  # calls answered in each sub-env's episode
        reopening = [False] * sessions  # its next result is an autoreset, not a call
        env.send((WAIT,) * sessions)
        while completed + lost < steps:
            obs, _, terminated, truncated, info = env.recv()
            ids = [int(i) for i in info["env_id"]]
            for pos, i in enumerate(ids):
                if reopening[i]:
                    reopening[i], calls[i] = False, 0
                    continue
                calls[i] += 1
                if truncated[pos] or obs["text"][pos] != f"waited {calls[i]}":
                    lost += 1
                    reason = info.get("error", [None] * len(ids))[pos]
                    errors.append(f"sub-env {i} call {calls[i]}: {obs['text'][pos]!r} {reason}")
                else:
                    completed += 1
                reopening[i] = bool(terminated[pos] or truncated[pos])
            env.send((WAIT,) * len(ids), env_ids=ids)
        env.recv(min_envs=len(env.in_flight))
    finally:
        env.close()
        tally.add(completed, lost, errors)


def _soak(url: str, *, steps: int, sessions: int, cut_every: int, task: dict[str, Any],
          mode: str = "threads") -> dict[str, Any]:
    tally = Tally()
    if mode == "vector":
        with FlakyProxy(url, cut_every=cut_every) as proxy:
            start = time.perf_counter()
            vector_soak(proxy.url, steps, sessions, task, tally)
            seconds = time.perf_counter() - start
            cuts = proxy.cuts
        return _result(tally, cuts, seconds)
    with FlakyProxy(url, cut_every=cut_every) as proxy:
        shares = [steps // sessions + (1 if i < steps % sessions else 0) for i in range(sessions)]
        threads = [
            threading.Thread(target=_worker, args=(proxy.url, n, task, i, tally), daemon=True)
            for i, n in enumerate(shares)
        ]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
        cuts = proxy.cuts
    return _result(tally, cuts, seconds)


def _result(tally: Tally, cuts: int, seconds: float) -> dict[str, Any]:
    return {
        "steps_completed": tally.completed,
        "steps_lost": tally.lost,
        "resumed_calls": cuts,
        "seconds": round(seconds, 2),
        "steps_per_s": round(tally.completed / seconds, 1),
        "errors": tally.errors,
    }


def run(
    steps: int = 10_000,
    sessions: int = 32,
    cut_every: int = 20,
    delay_ms: float = 2.0,
    episode_length: int = 100,
    mode: str = "threads",
) -> list[dict[str, Any]]:
    """The soak without faults (baseline), then with cuts; one row per run."""
    task = {"delay_ms": delay_ms, "length": episode_length}
    with _server() as url:
        baseline = _soak(url, steps=steps, sessions=sessions, cut_every=0, task=task,
                         mode=mode)
        faulty = _soak(url, steps=steps, sessions=sessions, cut_every=cut_every, task=task,
                       mode=mode)
    rows = []
    for case, result in (("no faults", baseline),
                         (f"cut 1 in {cut_every} tool-call streams", faulty)):
        rows.append({
            "benchmark": "soak",
            "mode": mode,
            "case": case,
            "sessions": sessions,
            "steps": steps,
            **result,
            "ratio_vs_no_faults": round(result["steps_per_s"] / baseline["steps_per_s"], 3),
        })
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table, then any errors seen."""
    lines = [f"{'case':<34} {'completed':>9} {'lost':>5} {'resumed':>8} {'steps/s':>8} "
             f"{'x no faults':>11}"]
    for r in rows:
        lines.append(
            f"{r['case']:<34} {r['steps_completed']:>9} {r['steps_lost']:>5} "
            f"{r['resumed_calls']:>8} {r['steps_per_s']:>8.1f} {r['ratio_vs_no_faults']:>11.3f}"
        )
    for r in rows:
        for error in r["errors"]:
            lines.append(f"  {r['case']}: {error}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1,000 steps instead of 10,000")
    parser.add_argument("--steps", type=int, help="total steps per run (default 10,000)")
    parser.add_argument("--sessions", type=int,
                        help="concurrent sessions (default 32 threads, 1,000 in vector mode)")
    parser.add_argument("--mode", choices=("threads", "vector"), default="threads",
                        help="a thread per OrsEnv session, or one OrsVectorEnv of them all")
    parser.add_argument("--cut-every", type=int, default=20,
                        help="cut every Nth acknowledged tool-call stream")
    parser.add_argument("--delay-ms", type=float, default=2.0, help="server time per step")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    steps = args.steps or (1_000 if args.quick else 10_000)
    sessions = args.sessions or (1_000 if args.mode == "vector" else 32)
    rows = run(steps=steps, sessions=sessions, cut_every=args.cut_every,
               delay_ms=args.delay_ms, mode=args.mode)
    print(format_table(rows))
    print("lost = steps that raised, were truncated, or saw a wrong call count (must be 0); "
          "resumed = streams cut after acknowledgement")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))
    return 1 if any(r["steps_lost"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
