"""NeMo Gym responses written by hand, as an agent would send them to ``/verify``."""

from __future__ import annotations

from typing import Any

__all__ = ["response"]


def response(text: str | None = None) -> dict[str, Any]:
    """A NeMo Gym response whose last output is an assistant message saying ``text`` (no
    output at all when None)."""
    output = [] if text is None else [{
        "id": "msg_0", "type": "message", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }]
    return {"id": "resp_0", "created_at": 0.0, "model": "stand-in", "object": "response",
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
