"""Episode records in the ``RecordTrajectories`` format, built from an async episode.

``RecordTrajectories`` wraps a blocking ``gym.Env``; the evaluation drives
``AsyncOrsEnv`` on one event loop, so it builds the same record here: the
fields :func:`ors_gym.trajectories.read_trajectories` readers (the viewer,
``trajectory_messages``, group scoring) expect, plus what an evaluation adds:
``model``, per-step and per-episode ``usage`` (token counts, where the
endpoint reports them), ``seconds``, and ``error`` (``{"reason", "message"}``)
for an episode an endpoint or infrastructure failure cut short.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from ors_gym._json import plain
from ors_gym.formats import StepExchange
from ors_gym.trajectories import ImageMode, episode_header, step_record

__all__ = ["EpisodeRecord", "add_usage"]


class EpisodeRecord:
    """One episode being recorded; :meth:`finish` gives the JSON-ready record."""

    def __init__(self, *, env_id: str, model: str, number: int, info: Mapping[str, Any],
                 server: str | None, images: str = "base64") -> None:
        self.images: ImageMode = "base64" if images == "base64" else "summary"
        self._started = time.perf_counter()
        self.data = episode_header(info, env_id=env_id, server=server, seed=None,
                                   images=self.images)
        self.data["model"] = model
        self.data["episode"] = number

    def add_step(self, action: Any, exchange: StepExchange, step: tuple[Any, ...],
                 usage: dict[str, int] | None) -> None:
        """Record one step: the model's ``action``, its ``exchange`` and ``env.step``'s result."""
        observation = step[0]
        text = observation.get("text") if isinstance(observation, Mapping) else None
        record = step_record(
            action, exchange, step, number=len(self.data["steps"]) + 1,
            observation_text=text, images=self.images,
        )
        record["usage"] = usage
        self.data["steps"].append(record)

    def finish(self, *, error: tuple[str, str] | None = None) -> dict[str, Any]:
        """The finished record; ``error`` = ``(reason, message)`` for a run cut short."""
        data = self.data
        steps = data["steps"]
        last = steps[-1] if steps else {}
        usage: dict[str, int] | None = None
        for s in steps:
            usage = add_usage(usage, s.get("usage"))
        terminated = bool(last.get("terminated", False))
        truncated = bool(last.get("truncated", False))
        data.update(
            length=len(steps),
            total_reward=float(sum(s["reward"] for s in steps)),
            terminated=terminated,
            truncated=truncated,
            complete=error is None and (terminated or truncated),
            ended_by=(
                "error" if error else "terminated" if terminated
                else "truncated" if truncated else "close"
            ),
            ended_at=time.time(),
            seconds=time.perf_counter() - self._started,
            usage=usage,
            error={"reason": error[0], "message": error[1]} if error else None,
        )
        return data


def add_usage(
    total: dict[str, int] | None, more: Mapping[str, Any] | None
) -> dict[str, int] | None:
    """``total`` plus the token counts ``more`` (None stays None until a count arrives)."""
    if not more:
        return total
    out = dict(total or {})
    for key, value in more.items():
        if isinstance(value, int):
            out[key] = out.get(key, 0) + value
    return out


def record_line(record: Mapping[str, Any]) -> str:
    """One JSON line for ``record``, as ``RecordTrajectories`` writes it."""
    return json.dumps(record, ensure_ascii=False, default=plain) + "\n"
