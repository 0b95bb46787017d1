"""The trajectory record format: one finished episode per JSON line.

A record holds the env id and name, task spec, split and index, the prompt
(text, and its blocks), the session's tools, and per step the action as given
(made JSON-safe), the assistant text, parsed tool calls with ids, each call's
result (text blocks, images as ``{"mime", "shape"}`` summaries or optionally
base64), rewards, ``terminated``/``truncated`` and their reasons. Nothing else
is written: no API key or secret reaches a trajectory (they travel only in
request headers).

Writers (the ``RecordTrajectories`` wrapper, the evaluation's recorder) build
records with :func:`episode_header` and :func:`step_record`; readers (the
viewer, Ray, scoring) use :func:`read_trajectories`, which returns each record
as an :class:`Episode`, and :func:`trajectory_messages`, which turns a record
back into ORS messages (for group scoring). This module depends on no wrapper,
so every one of them can import it.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ors_gym._json import plain
from ors_gym.actions import ToolCall
from ors_gym.formats import (
    AssistantTurn,
    StepExchange,
    ToolResult,
    as_block,
    exchange_messages,
)
from ors_gym.protocol import (
    Block,
    ImageBlock,
    Message,
    MessageBlock,
    ReasoningBlock,
    TextBlock,
)

__all__ = [
    "FORMAT",
    "Episode",
    "ImageMode",
    "block_content",
    "episode_header",
    "read_trajectories",
    "step_record",
    "trajectory_messages",
]

#: The ``format`` field of every record.
FORMAT = "ors_gym.trajectory/1"

#: How a record holds an image: a ``{"mime", "shape"}`` summary, or its base64 data too.
ImageMode = Literal["summary", "base64"]

def block_content(block: Any, images: ImageMode) -> dict[str, Any]:
    """A block as a record holds it: text, or an image as base64 or a ``{"mime", "shape"}``
    summary (``images``)."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock):
        item = {"type": "image", "mime": block.mimeType, "shape": _image_shape(block.data)}
        if images == "base64":
            item["data"] = block.data
        return item
    return {"type": getattr(block, "type", "unknown")}


def episode_header(
    info: Mapping[str, Any], *, env_id: str | None, server: str | None, seed: int | None,
    images: ImageMode,
) -> dict[str, Any]:
    """An episode record's opening fields, from its reset ``info``; ``steps`` starts empty.

    Shared by the ``RecordTrajectories`` wrapper and the evaluation's async recorder,
    so both write one format.
    """
    prompt = [as_block(b) for b in info.get("blocks") or ()]
    return {
        "format": FORMAT,
        "env_id": env_id,
        "env_name": info.get("env_name"),
        "server": server,
        "task_spec": plain(info.get("task_spec")),
        "split": info.get("split"),
        "index": info.get("index"),
        "seed": seed,
        "prompt": "\n".join(b.text for b in prompt if isinstance(b, TextBlock)),
        "prompt_content": [block_content(b, images) for b in prompt],
        "tools": plain(info.get("tools")),
        "terminal_tool": plain(info.get("terminal_tool")),
        "started_at": time.time(),
        "steps": [],
    }


def step_record(
    action: Any, exchange: StepExchange, step: tuple[Any, Any, Any, Any, Mapping[str, Any]],
    *, number: int, observation_text: str | None, images: ImageMode,
) -> dict[str, Any]:
    """One step's record: the action, its calls and results (``exchange``) and what
    ``env.step`` returned (``step``)."""
    _, reward, terminated, truncated, info = step
    turn = exchange.turn
    return {
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
                "tool_call_id": r.tool_call_id,
                "name": r.name,
                "input": plain(r.input),
                "ok": r.ok,
                "reward": r.reward,
                "finished": r.finished,
                "error": r.error,
                "error_reason": r.error_reason,
                "metadata": plain(r.metadata),
                "seconds": r.seconds,
                "content": [block_content(b, images) for b in r.blocks],
            }
            for r in exchange.results
        ],
        "not_run": [{"tool_call_id": i, "reason": why} for i, why in exchange.not_run],
        "feedback": [block_content(b, images) for b in exchange.feedback],
        "step": number,
        "observation": observation_text,
        "reward": float(reward),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "termination_reason": info.get("termination_reason"),
        "truncation_reason": info.get("truncation_reason"),
        "error_reason": info.get("error_reason"),
    }


def _image_shape(data: str) -> list[int] | None:
    """``[height, width, 3]`` of a base64 image, read from its header (no pixels decoded)."""
    from PIL import Image

    try:
        raw = base64.b64decode(data.split(",", 1)[-1] if data.startswith("data:") else data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(raw)) as image:
                width, height = image.size
    except (binascii.Error, ValueError, OSError, Image.DecompressionBombError):
        return None
    return [int(height), int(width), 3]


# ------------------------------------------------------------------------- reading


def read_trajectories(
    path: str | os.PathLike[str], *, strict: bool = False
) -> list[Episode]:
    """The episodes in a JSON-lines file of trajectory records, in order.

    Each is an :class:`Episode`: a plain dict that Jupyter shows as a transcript.

    A line that is not valid JSON (the tail of a write cut short by a crash)
    is skipped with a ``RuntimeWarning`` naming it; ``strict=True`` raises
    ``ValueError`` instead. Blank lines are ignored.
    """
    path = Path(path)
    episodes: list[Episode] = []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            last = all(not rest.strip() for rest in lines[number:])
            what = "the last line" if last else f"line {number}"
            message = (
                f"{path}: {what} is not a complete JSON record ({exc}); "
                "probably a write cut short by an interrupted run"
            )
            if strict:
                raise ValueError(message) from None
            warnings.warn(f"{message}; skipping it", RuntimeWarning, stacklevel=2)
            continue
        if not isinstance(record, dict):
            message = f"{path}: line {number} is not a JSON object"
            if strict:
                raise ValueError(message)
            warnings.warn(f"{message}; skipping it", RuntimeWarning, stacklevel=2)
            continue
        episodes.append(Episode(record))
    return episodes


class Episode(dict[str, Any]):
    """One recorded episode: the plain dict of its JSON line, shown in Jupyter as the
    viewer's transcript (prompt, calls, results, images, rewards, why it ended)."""

    def _repr_html_(self) -> str:
        from ors_gym.viewer.notebook import episode_html

        return episode_html(self)


def trajectory_messages(trajectory: Mapping[str, Any]) -> list[Message]:
    """A recorded episode as ORS messages: the prompt, then each step's two turns.

    Images recorded as summaries become a text note (``[image image/png
    40x40, not recorded]``); recorded base64 images come back as images.
    """
    if "steps" not in trajectory:
        raise ValueError(
            "not a recorded trajectory: it has no 'steps' (read one with read_trajectories)"
        )
    prompt = trajectory.get("prompt_content")
    if prompt is None:
        prompt = [{"type": "text", "text": str(trajectory.get("prompt") or "")}]
    first: list[MessageBlock] = [*_blocks(prompt)]
    messages = [Message(role="user", blocks=first)]
    for step in trajectory["steps"]:
        calls = tuple(
            ToolCall(str(c["name"]), dict(c.get("arguments") or {}), str(c["id"]))
            for c in step.get("tool_calls") or ()
        )
        turn = AssistantTurn(
            text=str(step.get("message") or ""),
            tool_calls=calls,
            reasoning=tuple(ReasoningBlock(text=str(t)) for t in step.get("reasoning") or ()),
        )
        results = tuple(
            ToolResult(
                tool_call_id=r.get("tool_call_id"),
                name=str(r.get("name", "")),
                input=dict(r.get("input") or {}),
                ok=bool(r.get("ok", True)),
                blocks=tuple(_blocks(r.get("content") or ())),
            )
            for r in step.get("results") or ()
        )
        not_run = tuple(
            (str(n["tool_call_id"]), str(n["reason"])) for n in step.get("not_run") or ()
        )
        feedback = tuple(_blocks(step.get("feedback") or ()))
        exchange = StepExchange(turn, results, not_run, feedback)
        messages.extend(exchange_messages(exchange))
    return messages


def _blocks(content: Sequence[Mapping[str, Any]]) -> list[Block]:
    out: list[Block] = []
    for item in content:
        if item.get("type") == "text":
            out.append(TextBlock(text=str(item.get("text", ""))))
        elif item.get("type") == "image" and item.get("data"):
            mime = str(item.get("mime") or "image/png")
            out.append(ImageBlock(data=str(item["data"]), mimeType=mime))
        elif item.get("type") == "image":
            shape = item.get("shape")
            size = f" {shape[1]}x{shape[0]}" if isinstance(shape, list) and len(shape) >= 2 else ""
            out.append(TextBlock(text=f"[image {item.get('mime', '')}{size}, not recorded]"))
    return out
