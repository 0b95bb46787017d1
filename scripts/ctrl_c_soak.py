"""Ctrl-C a vector env mid-batch again and again under CPU load; count sessions left open.

``python scripts/ctrl_c_soak.py [--mode step] [--sessions 200] [--runs 10] [--hogs 2]
[--max-seconds 300]``: two ``Census`` servers (tests/vector/test_scale.py's case), ``--hogs``
busy processes competing for the CPU, then per run a client process with ``--sessions``
sessions all running a call, SIGINT, and the servers' count of sessions still alive. Stops
after ``--runs`` runs or ``--max-seconds``, whichever comes first; exits 1 if any run left
a session open. Prints each run's exit time: the release of the sessions at exit must finish,
however long the machine's load makes it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _hog(until: float) -> None:
    while time.monotonic() < until:
        sum(range(10_000))


def main() -> int:
    from benchmarks._common import child_env
    from benchmarks.bench_scale import start_servers
    from tests.vector.test_scale import _CLIENT, CENSUS, census

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="step", help="the test's client mode (step, recv, async)")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes loading the CPU")
    parser.add_argument("--max-seconds", type=float, default=300.0)
    args = parser.parse_args()
    end = time.monotonic() + args.max_seconds
    hogs = [multiprocessing.Process(target=_hog, args=(end,), daemon=True)
            for _ in range(args.hogs)]
    servers = start_servers([CENSUS], 2)
    urls = [s.url for s in servers]
    leaked = runs = 0
    for hog in hogs:
        hog.start()
    try:
        while runs < args.runs and time.monotonic() < end:
            client = subprocess.Popen(
                [sys.executable, "-c", _CLIENT, args.mode, str(args.sessions), *urls],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=child_env(), cwd=ROOT,
            )
            assert client.stdout is not None
            assert client.stdout.readline().strip() == "in flight"
            while sum(census(u)["waiting"] for u in urls) < args.sessions:
                time.sleep(0.05)  # polls the servers' count: nothing notifies of it
            start = time.monotonic()
            client.send_signal(signal.SIGINT)
            _, err = client.communicate(timeout=300)
            seconds = time.monotonic() - start
            live = [census(u)["live"] for u in urls]
            runs += 1
            print(f"run {runs}: exit after SIGINT {seconds:.2f} s, sessions alive {live}",
                  flush=True)
            if any(live):
                leaked += 1
                print(err[-2000:], flush=True)
                for s in servers:
                    s.kill()
                for s in servers:
                    s.start()
    finally:
        for hog in hogs:
            hog.terminate()
        for s in servers:
            s.stop()
    print(f"{leaked} of {runs} runs left sessions open ({args.mode}, {args.sessions} sessions, "
          f"{args.hogs} CPU hogs)")
    return 1 if leaked else 0


if __name__ == "__main__":
    sys.exit(main())
