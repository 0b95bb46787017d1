"""A session's message reader skips what it read at the last request, and reads the same."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ors_gym.gateway.errors import GatewayError
from ors_gym.gateway.requests import ReadMessages, read_messages

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "increment", "arguments": '{"amount": 5}'}}


def _conversation(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Count."},
                                 {"role": "user", "content": "Make it 10."}]
    for k in range(turns):
        out += [{"role": "assistant", "content": f"Step {k}.", "reasoning_content": "Five.",
                 "tool_calls": [{**CALL, "id": f"call_{k}"}]},
                {"role": "tool", "tool_call_id": f"call_{k}", "content": f"now {5 * k}"}]
    return out


def test_a_growing_conversation_reads_as_a_fresh_read() -> None:
    reader = ReadMessages()
    for turns in range(4):  # each request a fresh JSON parse: equal, not the same objects
        raw = copy.deepcopy(_conversation(turns))
        assert reader(raw) == read_messages(raw)


def test_an_edited_earlier_message_is_read_again() -> None:
    reader = ReadMessages()
    raw = _conversation(2)
    reader(raw)
    edited = copy.deepcopy(raw)
    edited[2]["content"] = "Step zero, rewritten."  # the first assistant turn, trimmed
    edited.insert(4, {"role": "user", "content": [
        {"type": "text", "text": "Look."},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]})
    chat, images = reader(edited)
    assert (chat, images) == read_messages(edited)
    assert chat[2]["content"] == "Step zero, rewritten."
    shorter = edited[:3]  # compacted: fewer messages than before
    assert reader(shorter) == read_messages(shorter)


def test_an_unreadable_message_is_refused_and_forgets_nothing() -> None:
    reader = ReadMessages()
    raw = _conversation(1)
    reader(raw)
    with pytest.raises(GatewayError, match=r"messages\[4\] cannot be read"):
        reader([*raw, {"role": "wizard", "content": "x"}])
    assert reader(raw) == read_messages(raw)
