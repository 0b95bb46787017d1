"""A harness process: started in a process group of its own, stopped as a whole.

The harness runs in a new session (its own process group), so that stopping it
reaches everything it started (a node runtime, an MCP relay, a shell): SIGTERM to
the group, then SIGKILL after ``kill_grace`` seconds; the group is sent SIGKILL
once more after the harness exited, for children it left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["Ended", "run_process", "wait_until_cut"]

logger = logging.getLogger("ors_gym")


class Ended:
    """How a harness process ended: ``status`` (its exit status; negative: the signal
    that killed it; None: it never started), ``why`` (``"exited"``, ``"deadline"``,
    ``"finished"``: stopped after its episode ended, ``"unstartable"``), ``error``."""

    def __init__(self, status: int | None, why: str, error: str | None = None) -> None:
        self.status = status
        self.why = why
        self.error = error


async def run_process(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path,
                      stdin_text: str | None, stdout: IO[bytes], stderr: IO[bytes],
                      deadline: float, finished: asyncio.Event, finish_grace: float,
                      kill_grace: float) -> Ended:
    """Run ``argv`` until it exits, ``deadline`` seconds pass, or ``finish_grace``
    seconds after ``finished`` is set; the whole group is stopped in every case."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=str(cwd), env=dict(env), stdout=stdout, stderr=stderr,
            stdin=asyncio.subprocess.PIPE if stdin_text is not None
            else asyncio.subprocess.DEVNULL,
            start_new_session=True)
    except OSError as exc:
        return Ended(None, "unstartable", f"the harness could not start: {argv[0]!r}: {exc}")
    why = "exited"
    try:
        if stdin_text is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin_text.encode())
                await proc.stdin.drain()
                proc.stdin.close()
        waiting = asyncio.ensure_future(proc.wait())
        cut = await wait_until_cut(waiting, finished, deadline=deadline,
                                   finish_grace=finish_grace)
        if cut is not None:
            why = cut
            await _stop(proc, kill_grace)
        await waiting
    finally:
        if proc.returncode is None:  # cancelled: the group goes too
            await asyncio.shield(_stop(proc, kill_grace))
        _kill_group(proc.pid, signal.SIGKILL)
    return Ended(proc.returncode, why)


async def wait_until_cut(work: asyncio.Future[Any], finished: asyncio.Event, *,
                         deadline: float, finish_grace: float) -> str | None:
    """Wait for ``work`` to end, ``deadline`` seconds at most and ``finish_grace`` seconds
    after ``finished`` is set: None if it ended, else why it was cut (``"finished"``,
    ``"deadline"``); ``work`` is left running for the caller to stop."""
    ending = asyncio.ensure_future(_after(finished, finish_grace))
    try:
        done, _ = await asyncio.wait({work, ending}, timeout=deadline,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        ending.cancel()
    if work in done:
        return None
    return "finished" if ending in done else "deadline"


async def _after(event: asyncio.Event, seconds: float) -> None:
    await event.wait()
    await asyncio.sleep(seconds)  # the harness's grace to end on its own


async def _stop(proc: asyncio.subprocess.Process, kill_grace: float) -> None:
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), kill_grace)
    except TimeoutError:
        logger.warning("harness process %s ignored SIGTERM for %s s: killed", proc.pid,
                       kill_grace)
        _kill_group(proc.pid, signal.SIGKILL)
        await proc.wait()


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
