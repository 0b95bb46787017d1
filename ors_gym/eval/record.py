"""Episode records in the ``RecordTrajectories`` format, built from an async episode.

``RecordTrajectories`` wraps a blocking ``gym.Env``; the evaluation drives
``AsyncOrsEnv`` on one event loop, so it builds the same record here: the
fields :func:`ors_gym.wrappers.read_trajectories` readers (the viewer,
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
from ors_gym.formats import StepExchange, as_block
from ors_gym.protocol import ImageBlock, TextBlock
from ors_gym.wrappers.recording import FORMAT, _image_shape

__all__ = ["EpisodeRecord", "add_usage"]


class EpisodeRecord:
    """One episode being recorded; :meth:`finish` gives the JSON-ready record."""

    def __init__(self, *, env_id: str, model: str, number: int, info: Mapping[str, Any],
                 server: str | None, images: str = "base64") -> None:
        prompt = [as_block(b) for b in info.get("blocks") or ()]
        self.images = images
        self._started = time.perf_counter()
        self.data: dict[str, Any] = {
            "format": FORMAT,
            "env_id": env_id,
            "env_name": info.get("env_name"),
            "server": server,
            "model": model,
            "task_spec": plain(info.get("task_spec")),
            "split": info.get("split"),
            "index": info.get("index"),
            "seed": None,
            "prompt": "\n".join(b.text for b in prompt if isinstance(b, TextBlock)),
            "prompt_content": [self.content(b) for b in prompt],
            "tools": plain(info.get("tools")),
            "terminal_tool": plain(info.get("terminal_tool")),
            "started_at": time.time(),
            "steps": [],
            "episode": number,
        }

    def content(self, block: Any) -> dict[str, Any]:
        """A block as the record holds it (images as base64 or a ``{"mime", "shape"}`` summary)."""
        if isinstance(block, TextBlock):
            return {"type": "text", "text": block.text}
        if isinstance(block, ImageBlock):
            item = {"type": "image", "mime": block.mimeType, "shape": _image_shape(block.data)}
            if self.images == "base64":
                item["data"] = block.data
            return item
        return {"type": getattr(block, "type", "unknown")}

    def add_step(self, action: Any, exchange: StepExchange, step: tuple[Any, ...],
                 usage: dict[str, int] | None) -> None:
        """Record one step: the model's ``action``, its ``exchange`` and ``env.step``'s result."""
        observation, reward, terminated, truncated, info = step
        turn = exchange.turn
        self.data["steps"].append({
            "action": plain(action),
            "message": turn.text,
            "reasoning": [r.text for r in turn.reasoning],
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": plain(c.arguments)}
                for c in turn.tool_calls
            ],
            "parse_errors": list(turn.errors),
            "results": [
                {
                    "tool_call_id": r.tool_call_id, "name": r.name, "input": plain(r.input),
                    "ok": r.ok, "reward": r.reward, "finished": r.finished, "error": r.error,
                    "error_reason": r.error_reason, "metadata": plain(r.metadata),
                    "seconds": r.seconds, "content": [self.content(b) for b in r.blocks],
                }
                for r in exchange.results
            ],
            "not_run": [{"tool_call_id": i, "reason": why} for i, why in exchange.not_run],
            "feedback": [self.content(b) for b in exchange.feedback],
            "step": len(self.data["steps"]) + 1,
            "observation": observation.get("text") if isinstance(observation, Mapping) else None,
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "termination_reason": info.get("termination_reason"),
            "truncation_reason": info.get("truncation_reason"),
            "error_reason": info.get("error_reason"),
            "usage": usage,
        })

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
