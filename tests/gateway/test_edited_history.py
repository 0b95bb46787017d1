"""An echoed-and-edited history through the gateway, for every model family in the table.

An agent's first turn writes reasoning and a short note beside its call (where its family
can), its second a call; the harness then trims the first tool result. The gateway must
continue the row while the history is echoed and start a new row, as ``TokenEnv`` does,
when it is edited: the new row's prompt is what ``TokenEnv``'s bridge renders for the
request, each assistant turn as the family's template reads it (gpt-oss's harmony
template takes a calling turn's note in its analysis, after the reasoning, never beside
it: the gateway once sent both and got a 500 ``TemplateError``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("renderers")

from ors_gym.gateway import Gateway, GatewayThread
from ors_gym.sampling import VllmCompletions
from ors_gym.tokens import make_bridge
from tests._families import FAMILIES, _writable, completion, family_tokenizer
from tests._token_server import TokenServer

MOVE = {"type": "function", "function": {
    "name": "move", "description": "Move one cell.", "parameters": {
        "type": "object", "properties": {"direction": {"type": "string"}},
        "required": ["direction"]}}}
DOWN = (("move", {"direction": "down"}),)
LEFT = (("move", {"direction": "left"}),)
#: Families whose template cannot be proven append-only after a tool result (R1's writes no
#: generation prompt there): each turn starts a new row, in TokenEnv too.
NEW_ROWS = ("deepseek-v3",)
LONG = "The cell below is open. " * 6
TRIMMED = "The cell below is open. [trimmed]"


def _first_turn(name: str) -> tuple[str, str | None]:
    """The richest first turn the family writes: a note beside the call, and reasoning."""
    for content, think in (("Going down.", "Plan."), ("Going down.", None), ("", "Plan."),
                           ("", None)):
        if _writable(name, DOWN, content, think):
            return content, think
    raise AssertionError(name)


def _first(name: str, content: str, think: str | None) -> str:
    """The first turn as written after the generation prompt (R1's opens <think> after a
    user message)."""
    if name == "deepseek-v3":
        return f"{think or ''}\n</think>\n\n" + completion(name, DOWN, content=content)
    return completion(name, DOWN, content=content, think=think)


@pytest.fixture(scope="module", params=FAMILIES)
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, TokenServer, Gateway]]:
    name = request.param
    tok = family_tokenizer(name)
    content, think = _first_turn(name)
    script = [_first(name, content, think), completion(name, LEFT),
              completion(name, (), content="Done.")]
    with TokenServer(tok, script) as server:
        gw = Gateway(tok, VllmCompletions(server.base_url, name), model=name)
        with GatewayThread(gw):
            yield name, tok, server, gw


def _assistant(reply: dict[str, Any]) -> dict[str, Any]:
    """The reply's message as an agent echoes it (the SDK's dict, reasoning included)."""
    message = reply["choices"][0]["message"]
    return {k: v for k, v in message.items() if v is not None}


def _tool(message: dict[str, Any], content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": content}


def _templated(name: str, message: dict[str, Any], gw: Gateway) -> dict[str, Any]:
    """An echoed assistant message as the family's own template reads it."""
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    field = gw.bridge.family.reasoning_field
    if message.get("reasoning_content"):
        out[field] = message["reasoning_content"]
        if name == "gpt-oss" and out["content"] and message.get("tool_calls"):
            out[field] += "\n\n" + out["content"]  # harmony: the note in the analysis
            out["content"] = ""
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"] if gw.bridge.family.string_arguments
                else json.loads(c["function"]["arguments"])}}
            for c in message["tool_calls"]]
    return out


def test_an_edited_history_starts_a_new_row_from_the_familys_template(
    served: tuple[str, Any, TokenServer, Gateway]
) -> None:
    name, tok, server, gw = served
    session = gw.open_session()
    opening = [{"role": "system", "content": "You are a careful agent."},
               {"role": "user", "content": "Reach the corner."}]
    assert session.openai_base_url is not None
    with httpx.Client(base_url=session.openai_base_url, timeout=30,
                      headers={"Authorization": f"Bearer {session.api_key}"}) as http:

        def ask(messages: list[dict[str, Any]]) -> dict[str, Any]:
            answer = http.post("/chat/completions", json={
                "model": name, "messages": messages, "tools": [MOVE]})
            assert answer.status_code == 200, answer.text
            return _assistant(answer.json())

        first = ask(opening)
        assert first["tool_calls"][0]["function"]["name"] == "move"
        echoed = [*opening, first, _tool(first, LONG)]
        second = ask(echoed)
        rows = len(gw.trajectory(session.id).rows)
        assert rows == (2 if name in NEW_ROWS else 1)  # an echo continues the row
        edited = [*opening, first, _tool(first, TRIMMED), second, _tool(second, "Moved left.")]
        third = ask(edited)
    assert third["content"] == "Done."
    traj = gw.close_session(session.id, [1.0])
    gw.drop_session(session.id)
    assert len(traj.rows) == rows + 1 and traj.turns == 3
    assert traj.policy_versions == [None, None, None]  # one per turn (the sampler names none)
    # the new row's prompt: the family's template over the edited request, as it reads it
    want = [*opening, _templated(name, first, gw), _tool(first, TRIMMED),
            _templated(name, second, gw), _tool(second, "Moved left.")]
    assert traj.rows[-1].prompt_ids == make_bridge(tok, None, None).prompt(want, [MOVE])
    # the superseded row ends with the second turn, sampled verbatim and closed
    old = traj.rows[-2]
    sampled = server.requests[1].ids
    assert old.completion_ids[-len(sampled) - len(gw.bridge.close(sampled)):][:len(sampled)] \
        == sampled
    assert traj.rows[-1].completion_ids == server.requests[2].ids
    assert traj.messages[-1]["content"] == "Done."
