"""Messages as a coding harness sends it (the shapes Claude Code sends: ``?beta=true`` and
``anthropic-beta`` headers, ``thinking`` with ``display: omitted``, ``context_management``,
``metadata.user_id``, ``output_config``, system blocks, a ``system`` message in the
conversation, ``cache_control`` moving to the newest block, a message sent as a string one
turn and as blocks the next, thinking blocks echoed with their signatures): one row, the
sampled ids, the reasoning carried only by the signature; server tools refused.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.gateway._agents import counter_model
from tests.gateway.test_gateway import check_verbatim, qwen3_writer

TOOL = {"name": "increment", "description": "Add amount (1 to 5) to the counter.",
        "input_schema": {"type": "object", "properties": {"amount": {"type": "integer"}}},
        "defer_loading": False}
HEADERS = {"anthropic-version": "2023-06-01", "x-app": "cli",
           "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,"
                             "context-management-2025-06-27"}
EPHEMERAL = {"type": "ephemeral"}


def _body(messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    return {
        "model": "tiny", "max_tokens": 32000, "stream": stream, "messages": messages,
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1"},
                   {"type": "text", "text": "You are a coding agent.",
                    "cache_control": EPHEMERAL}],
        "tools": [{**TOOL, "cache_control": EPHEMERAL}],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": json.dumps({"session_id": "s-1"})},
        "output_config": {"effort": "high"},
    }


def _send(session: Any, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The reply's content blocks, and the SSE event names (streamed) or []."""
    headers = {**HEADERS, "x-api-key": session.api_key}
    url = f"{session.anthropic_base_url}/v1/messages?beta=true"
    if not body["stream"]:
        reply = httpx.post(url, json=body, headers=headers, timeout=30)
        assert reply.status_code == 200, reply.text
        return reply.json()["content"], []
    blocks: dict[int, dict[str, Any]] = {}
    names: list[str] = []
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as http:
        assert http.status_code == 200
        for line in http.iter_lines():
            if line.startswith("event: "):
                names.append(line[7:])
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == names[-1]  # every event named by its event: line
                if data["type"] == "content_block_start":
                    blocks[data["index"]] = dict(data["content_block"])
                elif data["type"] == "content_block_delta":
                    block, delta = blocks[data["index"]], data["delta"]
                    for kind, key in (("thinking_delta", "thinking"), ("text_delta", "text"),
                                      ("signature_delta", "signature"),
                                      ("input_json_delta", "partial")):
                        if delta["type"] == kind:
                            field = "partial_json" if key == "partial" else key
                            block[key] = block.get(key, "") + delta[field]
    for block in blocks.values():
        if block["type"] == "tool_use":
            block["input"] = json.loads(block.pop("partial"))
    return [blocks[i] for i in sorted(blocks)], names


def _uncached(messages: list[dict[str, Any]]) -> None:
    """Move the cache mark off every block (it is put on the newest one each turn)."""
    for message in messages:
        if isinstance(message["content"], list):
            for block in message["content"]:
                block.pop("cache_control", None)


@pytest.mark.parametrize("stream", [True, False])
def test_a_coding_harness_session_on_messages_stays_on_one_row(
    gateway: Any, backend: Any, script: Any, tok: Any, stream: bool
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    session = gateway.open_session()
    task = "The counter is at 0. Make it equal 7 using increment."
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>Be brief."
                                      "</system-reminder>"}, {"type": "text", "text": task}]},
        {"role": "system", "content": [{"type": "text", "text": "# Environment",
                                        "cache_control": EPHEMERAL}]}]
    value = 0
    for turn in range(1, 5):
        blocks, names = _send(session, _body(messages, stream))
        if stream:
            assert names[0] == "message_start" and names[-1] == "message_stop"
        thinking = [b for b in blocks if b["type"] == "thinking"]
        assert thinking and thinking[0]["thinking"] == ""  # display omitted: not in clear
        assert "to go" not in thinking[0]["signature"] and len(thinking[0]["signature"]) > 20
        calls = [b for b in blocks if b["type"] == "tool_use"]
        if not calls:
            break
        value += calls[0]["input"]["amount"]
        _uncached(messages)
        if turn == 1:  # the system message sent as blocks, then as a string
            messages[1] = {"role": "system", "content": "# Environment"}
        messages += [{"role": "assistant", "content": blocks},
                     {"role": "user", "content": [{
                         "type": "tool_result", "tool_use_id": calls[0]["id"],
                         "content": f"The counter is now {value}.",
                         "cache_control": EPHEMERAL}]}]
    assert value == 7 and turn == 3
    traj = gateway.trajectory(session.id)
    assert len(traj.rows) == 1 and traj.turns == 3
    check_verbatim(traj, backend.requests, tok)
    # A rewritten history (the system message dropped) starts a new row; its first turn's
    # reasoning, echoed only as a signature, is read back into the new row's rendering.
    _send(session, _body([messages[0], messages[2], messages[3]], stream))
    after = gateway.trajectory(session.id)
    assert len(after.rows) == 2 and after.rows[0].ids == traj.rows[0].ids
    assert "<think>\n7 to go.\n</think>" in tok.decode(after.rows[1].prompt_ids)
    gateway.drop_session(session.id)


def test_the_first_message_as_a_string_then_as_blocks_continues_the_row(
    gateway: Any, backend: Any, script: Any, tok: Any
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    session = gateway.open_session()
    task = "The counter is at 0. Make it equal 3 using increment."
    first = [{"role": "user", "content": task}]
    blocks, _ = _send(session, _body(first, False))
    (call,) = [b for b in blocks if b["type"] == "tool_use"]
    again = [{"role": "user", "content": [{"type": "text", "text": task}]},
             {"role": "assistant", "content": blocks},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                           "content": [{"type": "text", "text":
                                                        "The counter is now 3."}],
                                           "cache_control": EPHEMERAL}]}]
    _send(session, _body(again, False))
    traj = gateway.trajectory(session.id)
    assert len(traj.rows) == 1 and traj.turns == 2
    check_verbatim(traj, backend.requests, tok)
    gateway.drop_session(session.id)


def test_a_server_tool_is_refused_in_messages_shape_and_changes_nothing(
    gateway: Any, script: Any, tok: Any
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    session = gateway.open_session()
    task = [{"role": "user", "content": "The counter is at 0. Make it equal 3 using increment."}]
    _send(session, _body(task, False))
    before = gateway.trajectory(session.id)
    body = _body(task, True)
    body["tools"].append({"type": "web_search_20250305", "name": "web_search", "max_uses": 5})
    refused = httpx.post(f"{session.anthropic_base_url}/v1/messages?beta=true", json=body,
                         headers={**HEADERS, "x-api-key": session.api_key}, timeout=30)
    assert refused.status_code == 400
    error = refused.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "'web_search_20250305'" in error["error"]["message"]
    assert "--disallowedTools" in error["error"]["message"]
    assert gateway.trajectory(session.id) == before
    gateway.drop_session(session.id)
