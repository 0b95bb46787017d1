"""Record episodes as JSON lines, one finished episode per line, crash-safe.

``RecordTrajectories(env, path)`` appends each episode to ``path`` when it
ends (terminated or truncated), flushed and fsync'd, so a run killed at any
point keeps every episode it finished. An episode cut short by ``close()`` or
by a ``reset()`` before its end is written too, with ``"complete": false``
(unless it has no step yet: a reset made only to score a group writes nothing).
``read_trajectories(path)`` reads them back, skipping (with a warning) a last
line an interrupted write left truncated.

A line holds: the env id and name, task spec, split and index, the prompt
(text, and its blocks), the session's tools, and per step the action as given
(made JSON-safe), the assistant text, parsed tool calls with ids, each call's
result (text blocks, images as ``{"mime", "shape"}`` summaries or optionally
base64), rewards, ``terminated``/``truncated`` and their reasons. Nothing else
is written: no API key or secret reaches a trajectory (they travel only in
request headers). :func:`trajectory_messages` turns a record back into ORS
messages (for group scoring).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import os
import time
import warnings
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, SupportsFloat

import gymnasium as gym

from ors_gym._json import plain
from ors_gym.actions import ToolCall
from ors_gym.errors import OrsActionError, redact_url
from ors_gym.formats import (
    AssistantTurn,
    StepExchange,
    ToolResult,
    as_block,
    assistant_turn,
    call_id,
    exchange_messages,
    step_exchange,
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
    "RecordTrajectories",
    "read_trajectories",
    "trajectory_messages",
]

logger = logging.getLogger("ors_gym")

#: The ``format`` field of every record this module writes.
FORMAT = "ors_gym.trajectory/1"

ImageMode = Literal["summary", "base64"]


class RecordTrajectories(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Append each episode of ``env`` to the JSON-lines file ``path``.

    ``images``: ``"summary"`` (``{"mime", "shape"}``, no pixels) or
    ``"base64"`` (the image data too, so a trajectory can be replayed to a
    model or scored with its images). Works over ``OrsEnv`` directly or over
    wrappers that keep its ``info`` (``Conversation``, ``DiscreteToolActions``).
    Several recorders may append to one file: each line is one ``write``.
    """

    def __init__(
        self, env: gym.Env[Any, Any], path: str | os.PathLike[str], *, images: ImageMode = "summary"
    ) -> None:
        if images not in ("summary", "base64"):
            raise ValueError(f"images={images!r}; choose 'summary' or 'base64'")
        gym.utils.RecordConstructorArgs.__init__(self, path=str(path), images=images)
        super().__init__(env)
        self.path = Path(path)
        self.images: ImageMode = images
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._finalizer = weakref.finalize(self, os.close, self._fd)
        self._end_torn_line()
        self._episode: dict[str, Any] | None = None
        self._episodes = 0

    @property
    def episodes_written(self) -> int:
        """How many episodes this recorder has written."""
        return self._episodes

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._episode is not None and self._episode["steps"]:
            self._write(complete=False, ended_by="reset")
        observation, info = self.env.reset(seed=seed, options=options)
        ors = self.env.unwrapped
        self._episode = episode_header(
            info,
            env_id=getattr(getattr(ors, "spec", None), "id", None),
            server=redact_url(getattr(ors, "location", None)),
            seed=seed,
            images=self.images,
        )
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        episode = self._episode
        if episode is None:  # the env stepped without reset: nothing to attach to
            return observation, reward, terminated, truncated, info
        number = len(episode["steps"]) + 1
        try:
            turn = assistant_turn(action, step=number)
        except OrsActionError:  # an action an inner wrapper translated (a Discrete index...)
            turn = _turn_from_calls(info, number)
        exchange = step_exchange(turn, info, max_calls_per_step=_max_calls(self.env))
        text = _observation_text(observation) or _observation_text(info.get("observation"))
        episode["steps"].append(step_record(
            action, exchange, (observation, reward, terminated, truncated, info),
            number=number, observation_text=text, images=self.images,
        ))
        if terminated or truncated:
            self._write(complete=True, ended_by="terminated" if terminated else "truncated")
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Write an unfinished episode (``"complete": false``), close the file, then the env."""
        try:
            if self._episode is not None and self._episode["steps"] and self._fd is not None:
                self._write(complete=False, ended_by="close")
            self._episode = None
        finally:
            if self._finalizer.detach() is not None and self._fd is not None:
                os.close(self._fd)
            self._fd = None
            super().close()

    # -- records -------------------------------------------------------------------------
    def _write(self, *, complete: bool, ended_by: str) -> None:
        episode, self._episode = self._episode, None
        if episode is None or self._fd is None:
            return
        steps = episode["steps"]
        last = steps[-1] if steps else {}
        episode.update(
            episode=self._episodes,
            length=len(steps),
            total_reward=float(sum(s["reward"] for s in steps)),
            terminated=bool(last.get("terminated", False)),
            truncated=bool(last.get("truncated", False)),
            complete=complete,
            ended_by=ended_by,
            ended_at=time.time(),
        )
        line = (json.dumps(episode, ensure_ascii=False, default=plain) + "\n").encode()
        view = memoryview(line)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)
        self._episodes += 1

    def _end_torn_line(self) -> None:
        """Start on a fresh line if an interrupted run left a partial one at the end."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                logger.warning(
                    "%s ends with a partial line (an interrupted write); appending after it",
                    self.path,
                )
                os.write(self._fd, b"\n")


def _max_calls(env: gym.Env[Any, Any]) -> int:
    """The wrapped OrsEnv's ``max_calls_per_step`` (16, its default, for other envs)."""
    value = getattr(env.unwrapped, "max_calls_per_step", 16)
    return value if isinstance(value, int) else 16


def _turn_from_calls(info: Mapping[str, Any], step: int) -> AssistantTurn:
    """The turn an inner wrapper made: the calls ``info`` says ran."""
    calls = tuple(
        ToolCall(str(c.get("name")), dict(c.get("input") or {}), call_id(step, i))
        for i, c in enumerate(info.get("calls") or ())
    )
    return AssistantTurn(action=None, text="", tool_calls=calls)


def _observation_text(observation: Any) -> str | None:
    if isinstance(observation, Mapping) and isinstance(observation.get("text"), str):
        return str(observation["text"])
    return None


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

    Shared by :class:`RecordTrajectories` and the evaluation's async recorder, so
    both write one format.
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
    """The episodes in a JSON-lines file written by :class:`RecordTrajectories`, in order.

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
        from ors_gym.viewer import episode_html

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
            action=None,
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
