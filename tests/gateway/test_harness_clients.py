"""Harnesses on the Responses wire as they really send it: the OpenAI Agents SDK in its
default mode and pydantic-ai's ``openai:`` model (their scripts in ``harness_clients/``, run
by the harness venv's python, which scripts/harness-venv.sh builds), and raw requests shaped
as Codex sends them (always streamed, ``store: false``, the system prompt as a ``developer``
message, the whole history resent with the server's own items echoed verbatim, MCP tools in
a ``namespace``, tool results as strings or ``input_text`` parts, a compaction).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from _tiny_lm import answer_text, encode, tool_call_text

from tests._client_venvs import client_python
from tests.gateway._agents import TARGET, VALUE, counter_model
from tests.gateway.test_gateway import check_verbatim, qwen3_writer
from tests.gateway.test_responses import _events

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = Path(__file__).parent / "harness_clients"


@pytest.fixture(scope="module")
def harness_python() -> str:
    return client_python("harness")


def _run(python: str, client: str, session: Any, *args: str) -> str:
    done = subprocess.run([python, str(CLIENTS / client), session.openai_base_url,
                           session.api_key, *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("client", "args"), [
    ("agents_sdk_agent.py", ()), ("agents_sdk_agent.py", ("stream",)),
    ("pydantic_ai_agent.py", ())])
def test_an_agent_sdk_plays_through_the_responses_wire_on_one_row(
    harness_python: str, gateway: Any, backend: Any, script: Any, tok: Any, client: str,
    args: tuple[str, ...]
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    session = gateway.open_session()
    said = _run(harness_python, client, session, "7", *args)
    traj = gateway.close_session(session.id, [1.0])
    gateway.drop_session(session.id)
    assert said == "Done."
    # 5 then 2 then the answer: three turns, each continuing the row, each as sampled
    assert traj.turns == 3 and len(traj.rows) == 1
    check_verbatim(traj, backend.requests, tok)
    calls = [m["tool_calls"][0]["function"] for m in traj.messages if m.get("tool_calls")]
    assert [c["name"] for c in calls] == ["increment", "increment"]
    assert [m["content"] for m in traj.messages if m["role"] == "tool"] == [
        "The counter is now 5.", "The counter is now 7."]


NAMESPACE = {"type": "namespace", "name": "mcp__counter", "description": "The counter.",
             "tools": [{"type": "function", "name": "increment", "description": "Add.",
                        "parameters": {"type": "object",
                                       "properties": {"amount": {"type": "integer"}}}}]}
SHELL = {"type": "function", "name": "shell", "description": "Run a command.",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}


def _codex_model(tok: Any) -> Any:
    """The backend's script: the Counter's model, calling the namespaced tool flat."""

    def script(ids: list[int], text: str) -> list[int]:
        target, value = int(TARGET.findall(text)[-1]), int(VALUE.findall(text)[-1])
        if value < target:
            step = min(5, target - value)
            out = tool_call_text("mcp__counter__increment", {"amount": step},
                                 think=f"{target - value} to go.")
        else:
            out = answer_text("Done.", think="It is reached.")
        return [*encode(tok, out), tok.eos_token_id]

    return script


def _codex_turn(session: Any, items: list[dict[str, Any]]) -> tuple[list[Any], dict[str, Any]]:
    """One Codex-shaped request: (the output items of ``response.output_item.done``, the
    completed response)."""
    body = {"model": "tiny", "input": items, "tools": [SHELL, NAMESPACE],
            "tool_choice": "auto", "parallel_tool_calls": True, "stream": True,
            "store": False, "include": ["reasoning.encrypted_content"],
            "reasoning": {"summary": "auto"}, "prompt_cache_key": "thread-1",
            "client_metadata": {"session_id": "thread-1", "turn_id": "turn-1"}}
    events = _events(session.openai_base_url, session.api_key, body)
    done = [d["item"] for name, d in events if name == "response.output_item.done"]
    assert events[-1][0] == "response.completed"
    return done, events[-1][1]["response"]


def test_a_codex_shaped_session_continues_its_row_until_a_compaction(
    gateway: Any, backend: Any, script: Any, tok: Any
) -> None:
    script.use(_codex_model(tok))
    session = gateway.open_session()
    task = "The counter is at 0. Make it equal 7 using increment."
    items: list[dict[str, Any]] = [  # as Codex opens a thread: two developer messages,
        # the environment's context, then the task; each with an id of its own
        {"type": "message", "id": "msg_1", "role": "developer",
         "content": [{"type": "input_text", "text": "You are a coding agent."}]},
        {"type": "message", "id": "msg_2", "role": "developer",
         "content": [{"type": "input_text", "text": "<skills_instructions/>"}]},
        {"type": "message", "id": "msg_3", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n"
                                           "</environment_context>"}]},
        {"type": "message", "id": "msg_4", "role": "user",
         "content": [{"type": "input_text", "text": task}]}]
    value, turns = 0, 0
    while True:
        output, response = _codex_turn(session, items)
        turns += 1
        assert response["usage"]["input_tokens"] == len(backend.requests[-1].prompt_ids)
        calls = [i for i in output if i["type"] == "function_call"]
        if not calls:
            break
        (call,) = calls  # the flat name answered in the namespace's shape
        assert (call["namespace"], call["name"]) == ("mcp__counter", "increment")
        (reasoning,) = [i for i in output if i["type"] == "reasoning"]
        # Codex asks for a summary: the text there, and the handle holds it opaquely
        assert reasoning["summary"][0]["text"].endswith("to go.")
        assert "to go" not in reasoning["encrypted_content"]
        value += json.loads(call["arguments"])["amount"]
        result = f"The counter is now {value}."
        # echoed verbatim, with fields the gateway never sent; results as either shape
        items += [{**i, "phase": None} for i in output]
        items.append({"type": "function_call_output", "id": f"fco_{turns}",
                      "call_id": call["call_id"],
                      "output": result if turns == 1 else [
                          {"type": "input_text", "text": result}]})
    assert value == 7 and turns == 3
    traj = gateway.trajectory(session.id)
    assert len(traj.rows) == 1 and traj.turns == 3
    check_verbatim(traj, backend.requests, tok)
    assert traj.tools[1]["function"]["name"] == "mcp__counter__increment"
    # Codex's compaction rewrites the history as a summary: a new row, the old one kept
    compacted = [*items[:3], {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Summary: the counter is at 7. Make it equal 9 using "
                                       "increment. The counter is now 7."}]}]
    _codex_turn(session, compacted)
    after = gateway.trajectory(session.id)
    assert len(after.rows) == 2 and after.rows[0].ids == traj.rows[0].ids
    check_verbatim(after, backend.requests, tok)
    gateway.drop_session(session.id)



def _guide_blocks(lang: str) -> list[str]:
    """The guide's fenced blocks in ``lang``."""
    page = (ROOT / "docs" / "guides" / "gateway.md").read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}\n(.*?)^```", page, re.MULTILINE | re.DOTALL)


def test_the_guides_codex_and_claude_code_settings_reach_a_session(
    gateway: Any, backend: Any, script: Any, tok: Any
) -> None:
    """The guide's Codex config.toml and Claude Code variables, pointed at this gateway,
    reach the session whose key they carry on the plain paths."""
    script.use(_codex_model(tok))
    session = gateway.open_session()
    (toml,) = [b for b in _guide_blocks("toml") if "wire_api" in b]
    config = tomllib.loads(toml)
    provider = config["model_providers"][config["model_provider"]]
    assert provider["wire_api"] == "responses" and config["web_search"] == "disabled"
    assert provider["base_url"] == "http://127.0.0.1:8000/v1"
    codex = next(b for b in _guide_blocks("bash") if "codex exec" in b)
    assert f"export {provider['env_key']}=" in codex
    base = provider["base_url"].replace("http://127.0.0.1:8000", gateway.url)
    plain = type("Plain", (), {"openai_base_url": base, "api_key": session.api_key})
    task = "The counter is at 0. Make it equal 2 using increment."
    output, _ = _codex_turn(plain, [{"type": "message", "role": "user", "content": task}])
    assert [i["type"] for i in output] == ["reasoning", "function_call"]
    claude = next(b for b in _guide_blocks("bash") if "ANTHROPIC_BASE_URL" in b)
    variables = dict(re.findall(r"^export (\w+)=(\S+)", claude, re.MULTILINE))
    assert set(variables) == {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"}
    url = variables["ANTHROPIC_BASE_URL"].replace("http://127.0.0.1:8000", gateway.url)
    reply = httpx.post(f"{url}/v1/messages?beta=true", timeout=30, headers={
        "x-api-key": session.api_key, "anthropic-version": "2023-06-01"}, json={
        "model": "my-model", "max_tokens": 64, "messages": [{"role": "user", "content": task}]})
    assert reply.status_code == 200 and reply.json()["stop_reason"] == "tool_use"
    assert gateway.trajectory(session.id).turns == 2
    gateway.drop_session(session.id)
