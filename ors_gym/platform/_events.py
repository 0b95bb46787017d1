"""A recorded episode as the platform's rollout log: the events the SDK's client sends.

``log_entries`` reads a trajectory record (``RecordTrajectories``'s or
``ors-gym eval``'s) as the messages a model saw and wrote: the prompt, then
per step its reasoning, its text, its tool calls and their results, and any
feedback; the step's reward rides on its last message, and the episode's
end on the last one. ``rollout_events`` encodes them exactly as
``openreward``'s ``Rollout.create`` and ``Rollout.log`` do (a ``rollout``
event, then ``message`` events indexed from 0, and a ``rollout_update``
carrying ``rollout_info``: the task index the platform's difficulty is
grouped by), so the platform sees an ors_gym rollout as one of the SDK's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LogEntry", "RolloutHeader", "log_entries", "rollout_events"]


@dataclass(frozen=True)
class LogEntry:
    """One message of the log: the SDK's normalized event and ``log``'s keywords."""

    type: str
    content: str | None = None
    name: str | None = None
    call_id: str | None = None
    reward: float | None = None
    is_finished: bool = False


@dataclass(frozen=True)
class RolloutHeader:
    """What the ``rollout`` event says: the SDK's ``RolloutConfig`` and looked-up ids."""

    run_name: str
    rollout_name: str | None = None
    environment: str | None = None
    environment_id: str | None = None
    variant: str | None = None
    variant_id: str | None = None
    split: str | None = None
    metadata: Mapping[str, Any] | None = None
    task_spec: Mapping[str, Any] | None = None
    run_info: Mapping[str, Any] | None = None


def _clean(text: str) -> str:
    """As the SDK sanitises content: no NUL bytes, lone surrogates escaped."""
    return text.replace("\x00", "").encode("utf-8", "backslashreplace").decode("utf-8")


def _text(content: Sequence[Mapping[str, Any]] | None) -> str:
    parts = []
    for block in content or ():
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "image":
            parts.append(f"[image {block.get('mime', '')}]")
    return "\n".join(parts)


def log_entries(record: Mapping[str, Any]) -> list[LogEntry]:
    """The messages of a recorded episode, in order (see the module docstring)."""
    entries: list[LogEntry] = []
    prompt = record.get("prompt")
    if prompt:
        entries.append(LogEntry("user_message", str(prompt)))
    steps = list(record.get("steps") or ())
    for number, step in enumerate(steps, start=1):
        first = len(entries)
        for thought in step.get("reasoning") or ():
            entries.append(LogEntry("reasoning", str(thought)))
        if step.get("message"):
            entries.append(LogEntry("assistant_message", str(step["message"])))
        for call in step.get("tool_calls") or ():
            arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
            entries.append(LogEntry("tool_call", arguments, name=str(call.get("name")),
                                    call_id=str(call.get("id"))))
        for result in step.get("results") or ():
            entries.append(LogEntry("tool_result", _text(result.get("content")),
                                    call_id=str(result.get("tool_call_id"))))
        feedback = _text(step.get("feedback"))
        if feedback:
            entries.append(LogEntry("user_message", feedback))
        if len(entries) == first:  # a step that said nothing: its reward still counts
            entries.append(LogEntry("assistant_message", ""))
        last = entries[-1]
        done = number == len(steps) and bool(step.get("terminated") or step.get("truncated"))
        entries[-1] = LogEntry(last.type, last.content, last.name, last.call_id,
                               float(step.get("reward", 0.0)), done)
    return entries


def _strip_none(value: dict[str, Any]) -> dict[str, Any]:
    """As the SDK encodes events: keys whose value is None left out, in nested dicts too."""
    return {k: _strip_none(v) if isinstance(v, dict) else v
            for k, v in value.items() if v is not None}


def _now_ms() -> int:
    return int(time.time() * 1000)


def rollout_events(
    header: RolloutHeader, entries: Sequence[LogEntry], *, rollout_id: str,
    rollout_info: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The events of one rollout, as the SDK encodes them; ``rollout_info`` (``task_index``,
    ``duration_ms``...) goes in a ``rollout_update`` before the last message, as
    ``Rollout.log(..., rollout_info=...)`` sends it."""
    h = header
    events = [_strip_none({
        "eventId": rollout_id, "timestamp": _now_ms(), "runName": h.run_name, "step": None,
        "environment": h.environment, "environment_id": h.environment_id,
        "rolloutName": h.rollout_name, "variant": h.variant, "variant_id": h.variant_id,
        "split": h.split, "metadata": None if h.metadata is None else dict(h.metadata),
        "task_spec": None if h.task_spec is None else dict(h.task_spec),
        "run_info": None if h.run_info is None else dict(h.run_info), "rollout_info": None,
        "eventType": "rollout",
    })]
    for index, entry in enumerate(entries):
        if rollout_info is not None and index == len(entries) - 1:
            events.append(_strip_none({
                "eventId": rollout_id, "timestamp": _now_ms(),
                "rollout_info": dict(rollout_info), "eventType": "rollout_update",
            }))
        events.append(_strip_none({
            "eventId": str(uuid.uuid4()), "timestamp": _now_ms(), "index": index,
            "rolloutEventId": rollout_id, "type": entry.type,
            "content": None if entry.content is None else _clean(entry.content),
            "contentReference": None, "summary": None, "name": entry.name,
            "callId": entry.call_id, "environment_id": h.environment_id,
            "reward": entry.reward, "isFinished": entry.is_finished, "metadata": {},
            "eventType": "message",
        }))
    return events
