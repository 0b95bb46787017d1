"""``bench_vector``'s processes: each case's child, its memory and CPU read from outside,
and another commit's tree to run the baseline case from."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The measured process, run as a file so ``ors_gym`` comes from ``PYTHONPATH`` alone.
CHILD = Path(__file__).resolve().parent / "_vector_child.py"


# -- memory and CPU of a process tree, read from outside ---------------------------------------


def tree(pid: int) -> list[int]:
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


def rss_mb(pids: Sequence[int]) -> float:
    return sum(_proc_kb(f"/proc/{p}/status", "VmRSS") for p in pids) / 1024


def pss_mb(pids: Sequence[int]) -> float:
    return sum(_proc_kb(f"/proc/{p}/smaps_rollup", "Pss") for p in pids) / 1024


def cpu_s(pid: int) -> float:
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
            self.peak = max(self.peak, rss_mb(tree(self.pid)))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


# -- the processes -----------------------------------------------------------------------------


def child_env(source: Path) -> dict[str, str]:
    """A child's environment: ``ors_gym`` importable from ``source`` only, the SDK quiet."""
    env = dict(os.environ)
    env.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    env.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")
    env["PYTHONPATH"] = str(source)
    return env


class Case:
    """One case's process: started, stepped on command, measured from outside.

    ``source`` is the tree its ``ors_gym`` is imported from (this one, or a
    baseline's); ``step_case`` the case the child steps (``case`` may be a
    label such as ``OrsVectorEnv@main``). Start every case, then ``wait_setup``
    each, so their imports and warm-ups overlap.
    """

    def __init__(self, case: str, n: int, url: str, delay_ms: float, server_pid: int,
                 source: Path = ROOT, step_case: str | None = None) -> None:
        self.case = case
        self.n = n
        self.server_pid = server_pid
        self.server_cpu = 0.0
        self.source = source
        cmd = [sys.executable, str(CHILD), step_case or case, str(n), url, str(delay_ms)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=child_env(source), cwd=source)
        self.sampler = _PeakSampler(self.proc.pid)
        self.setup = 0.0
        self.runs: list[dict[str, float]] = []
        self.pss: list[float] = []

    def wait_setup(self) -> None:
        """Wait for the child to be built and warmed up; check where its ``ors_gym`` is from."""
        answer = self._answer()
        self.setup = float(answer["setup"])
        origin = Path(answer.get("ors_gym", ""))
        if origin.resolve() != self.source.resolve():
            raise RuntimeError(
                f"{self.case} imported ors_gym from {origin}, not from {self.source}; "
                "is ors_gym installed non-editable over PYTHONPATH?"
            )

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
        before = cpu_s(self.server_pid)
        self._send(f"run {seconds}")
        result = self._answer()
        self.server_cpu += cpu_s(self.server_pid) - before
        self.runs.append(result)
        self.pss.append(pss_mb(tree(self.proc.pid)))
        return result["env_steps"] / result["seconds"]

    def close(self) -> float:
        """End the process; returns its tree's peak RSS."""
        peak = self.sampler.stop()
        if self.proc.poll() is None:
            try:
                self._send("close")
                self.proc.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        return peak


# -- another commit's tree ----------------------------------------------------------------------


def short_ref(ref: str) -> str:
    """How a case names a ref: a commit hash shortened, a branch or tag as given."""
    if re.fullmatch(r"[0-9a-fA-F]{8,40}", ref):
        return ref[:7]
    return ref


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(
            f"git {' '.join(args)} failed: {done.stderr.strip()}; pass --baseline a ref of "
            f"the repository at {ROOT} (a branch, tag or commit)"
        )
    return done.stdout.strip()


@contextmanager
def ref_tree(ref: str) -> Iterator[tuple[Path, str]]:
    """The files of ``ref`` (``git archive``) in a temporary folder, removed at exit;
    yields the folder and the commit's hash."""
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}")
    folder = Path(tempfile.mkdtemp(prefix=f"bench-vector-{short_ref(ref)}-".replace("/", "-")))
    try:
        archive = subprocess.Popen(["git", "archive", "--format=tar", commit], cwd=ROOT,
                                   stdout=subprocess.PIPE)
        untar = subprocess.run(["tar", "-x", "-C", str(folder)], stdin=archive.stdout,
                               capture_output=True)
        assert archive.stdout is not None
        archive.stdout.close()
        if archive.wait() != 0 or untar.returncode != 0:
            raise RuntimeError(f"could not extract {ref} ({commit}) into {folder}: "
                               f"{untar.stderr.decode(errors='replace').strip()}")
        if not (folder / "ors_gym" / "__init__.py").is_file():
            raise ValueError(f"{ref} ({commit}) has no ors_gym package to measure")
        yield folder, commit
    finally:
        shutil.rmtree(folder, ignore_errors=True)
