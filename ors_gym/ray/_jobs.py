"""One episode of a rollout as the driver tracks it, and the records that report it.

A :class:`Job` is a task waiting in the queue or running on an actor: where it
runs (actor, server), its open session and its attempts. ``rollout_info`` is
the ``"rollout"`` part of every record; ``failed_record`` is the record of an
episode that produced no trajectory (its actor died, or it raised).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ors_gym.trajectories import FORMAT

__all__ = ["Job", "cause", "failed_record", "rollout_info"]


@dataclass
class Job:
    """One task of the run: queued (``actor == -1``) or in flight on ``actor`` / ``server``."""

    index: int
    task: dict[str, Any]
    seed: int | None
    attempt: int = 0
    actor: int = -1
    server: str | None = None
    session: str | None = None
    #: Its record has arrived: no longer counted as running, though its call may not have ended.
    ended: bool = False


def rollout_info(job: Job) -> dict[str, Any]:
    """Where ``job`` ran: ``task_index``, ``attempt``, ``actor``, ``server``, ``session_id``."""
    return {
        "task_index": job.index,
        "attempt": job.attempt,
        "actor": job.actor,
        "server": job.server,
        "session_id": job.session,
    }


def failed_record(
    job: Job,
    *,
    env_id: str | None,
    env_name: str | None,
    ended_by: str,
    error: str,
    session: str | None = None,
) -> dict[str, Any]:
    """The record of ``job`` when it yields no trajectory: no steps, ``"complete": false``.

    It has every top-level field of a finished record (what it cannot know is None),
    so code reading ``record["index"]`` works on both.

    ``session``: the session it had open when it was lost (else its current one).
    """
    task = job.task
    return {  # a finished record's top-level fields, so every record has one shape
        "format": FORMAT,
        "env_id": env_id,
        "env_name": env_name,
        "server": job.server,
        "task_spec": task.get("task_spec"),
        "split": task.get("split"),
        "index": task.get("index"),
        "task": task,
        "seed": job.seed,
        "prompt": None,
        "prompt_content": [],
        "tools": None,
        "terminal_tool": None,
        "started_at": None,
        "steps": [],
        "episode": None,
        "length": 0,
        "total_reward": 0.0,
        "terminated": False,
        "truncated": False,
        "complete": False,
        "ended_by": ended_by,
        "error": error,
        "ended_at": time.time(),
        "rollout": {**rollout_info(job), "session_id": session or job.session},
    }


def cause(exc: BaseException) -> str:
    """The last line of a Ray error's text: the cause, without Ray's traceback."""
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
