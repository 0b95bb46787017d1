"""``ors_gym._cleanup``: a cleanup handed to its thread is finished before the process exits.

At exit, ``weakref.finalize``'s hook usually runs before ``_cleanup``'s (``import ors_gym``
registers ``_cleanup``'s first, and the later hook runs first), so an env's finaliser
queues its release (deleting its sessions) and the cleanup thread may take it from the
queue before the exit hook looks. The exit hook must then wait for that running job, for as
long as the deletions take: a job it does not wait for is stopped with the interpreter, and
its sessions outlive the process (what a Ctrl-C of a vector env on a loaded machine did).
Each case runs in a child process that exits while the job runs in the cleanup thread.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The order of a vector env at exit: _cleanup's hook registered first, then a hook that lets
# the cleanup thread take the job (it waits until the job has started), then the finaliser.
_CHILD = r'''
import atexit, sys, threading, time, weakref
from ors_gym import _cleanup

seconds, out = float(sys.argv[1]), sys.argv[2]
started = threading.Event()

def release():
    started.set()
    time.sleep(seconds)  # the deletions: slow on a loaded machine
    with open(out, "w") as f:
        f.write(threading.current_thread().name)

atexit.register(lambda: started.wait(30))  # runs after the finaliser, before the drain

class Env:
    pass

env = Env()
weakref.finalize(env, _cleanup.schedule, release)
'''


def _exit_during_a_cleanup(tmp_path: Path, seconds: float) -> str | None:
    """The thread that finished the job (None: the process exited without finishing it)."""
    out = tmp_path / "released"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(seconds), str(out)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out.read_text() if out.exists() else None


def test_exit_waits_for_the_cleanup_its_thread_runs(tmp_path: Path) -> None:
    assert _exit_during_a_cleanup(tmp_path, 0.2) == "ors-gym-cleanup"


@pytest.mark.slow
def test_exit_waits_for_a_cleanup_longer_than_ten_seconds(tmp_path: Path) -> None:
    """Ten seconds was the exit hook's old bound: deleting a few hundred sessions on a
    loaded machine can take longer, and the release was cut off mid-way."""
    assert _exit_during_a_cleanup(tmp_path, 11.0) == "ors-gym-cleanup"
