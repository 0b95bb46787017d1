"""Calls that only POSIX has, and what runs where they are missing (Windows).

Each fallback is exercised here, on POSIX, by removing the POSIX call for the
test; the real processes and sockets stay real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from ors_gym.envs import _local_sandbox


def test_a_command_is_killed_without_process_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100)"],
                            start_new_session=True)
    try:
        monkeypatch.delattr(os, "killpg", raising=False)
        _local_sandbox._kill_group(proc.pid)
        assert proc.wait(timeout=10) != 0  # ended by the signal, not by itself
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _local_sandbox._kill_group(proc.pid)  # already gone (reaped): not an error


def test_a_group_is_killed_where_there_are_process_groups() -> None:
    if not hasattr(os, "killpg"):
        pytest.skip("this platform has no process groups")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100)"],
                            start_new_session=True)
    _local_sandbox._kill_group(proc.pid)
    assert proc.wait(timeout=10) == -signal.SIGKILL
