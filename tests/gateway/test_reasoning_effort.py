"""A request's reasoning effort reaches a chat template that reads one: gpt-oss's harmony
template renders ``Reasoning: <effort>`` in its system message. Responses'
``reasoning.effort``, Chat's ``reasoning_effort`` and Messages' ``output_config.effort``
render the prompt exactly as ``apply_chat_template(..., reasoning_effort=...)`` does; a
changed effort starts a new row; a template with no such variable (Qwen3's) ignores it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from _families import completion, family_tokenizer
from _tiny_lm import answer_text, encode

from ors_gym.gateway import Gateway, GatewayThread
from ors_gym.sampling import VllmCompletions
from tests._token_server import TokenServer

ANSWER = completion("gpt-oss", (), content="All done.")
CALL = completion("gpt-oss", (("add", {"n": 1}),))
TOOL = {"type": "function", "name": "add", "description": "Add n.",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                       "required": ["n"]}}


def _model(ids: list[int], text: str) -> str:
    """A call after a user message; a plain answer after the call's result."""
    return ANSWER if "<|start|>functions.add" in text else CALL


@pytest.fixture(scope="module")
def oss() -> Iterator[tuple[Any, TokenServer, Gateway]]:
    tok = family_tokenizer("gpt-oss")
    with TokenServer(tok, _model) as server:
        gw = Gateway(tok, VllmCompletions(server.base_url, "oss"), model="oss")
        with GatewayThread(gw):
            yield tok, server, gw


def _rendered(tok: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                   **kwargs)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _client(gw: Gateway) -> tuple[str, openai.OpenAI]:
    info = gw.open_session()
    base = info.openai_base_url
    assert base is not None
    return info.id, openai.OpenAI(base_url=base, api_key=info.api_key, max_retries=0)


def _played(client: openai.OpenAI, efforts: tuple[str, str]) -> None:
    """A call turn at the first effort, its result sent back at the second."""
    one = client.responses.create(model="oss", input="Count to three.", tools=[TOOL],
                                  reasoning={"effort": efforts[0]})
    (call,) = [item for item in one.output if item.type == "function_call"]
    client.responses.create(
        model="oss", previous_response_id=one.id, tools=[TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "1"}],
        reasoning={"effort": efforts[1]})


def test_responses_effort_is_the_templates_and_a_changed_one_starts_a_row(
    oss: tuple[Any, TokenServer, Gateway]
) -> None:
    tok, server, gw = oss
    assert gw.reads_effort
    first = [{"role": "user", "content": "Count to three."}]
    tools = [{"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}]
    sid, client = _client(gw)
    server.requests.clear()
    _played(client, ("high", "high"))
    high = _rendered(tok, first, tools=tools, reasoning_effort="high")
    assert server.requests[0].prompt_ids == high
    # the prompt differs from the default rendering by the effort line only
    plain = tok.decode(_rendered(tok, first, tools=tools), skip_special_tokens=False)
    assert "Reasoning: medium" in plain
    assert tok.decode(high, skip_special_tokens=False) == plain.replace(
        "Reasoning: medium", "Reasoning: high")
    assert len(gw.trajectory(sid).rows) == 1  # the same effort continues the row
    gw.close_session(sid)
    # another effort renders the conversation anew: a new row, in that effort
    sid, client = _client(gw)
    _played(client, ("high", "low"))
    traj = gw.trajectory(sid)
    assert len(traj.rows) == 2 and traj.turns == 2
    history = traj.messages[: traj.rows[1].first_message]
    assert history[-1]["role"] == "tool"
    low = _rendered(tok, history, tools=tools, reasoning_effort="low")
    assert traj.rows[1].prompt_ids == low == server.requests[-1].prompt_ids
    assert "Reasoning: low" in tok.decode(low, skip_special_tokens=False)
    gw.close_session(sid)


def test_chat_and_messages_efforts_reach_the_template(
    oss: tuple[Any, TokenServer, Gateway]
) -> None:
    tok, server, gw = oss
    asked = [{"role": "user", "content": "Hello."}]
    sid, client = _client(gw)
    server.requests.clear()
    client.chat.completions.create(model="oss", messages=asked,
                                   reasoning_effort="low")
    assert server.requests[-1].prompt_ids == _rendered(tok, asked, reasoning_effort="low")
    gw.close_session(sid)
    info = gw.open_session()
    claude = anthropic.Anthropic(base_url=info.anthropic_base_url, api_key=info.api_key,
                                 max_retries=0)
    claude.messages.create(model="oss", max_tokens=64, messages=asked,  # type: ignore[arg-type]
                           extra_body={"output_config": {"effort": "high"}})
    assert server.requests[-1].prompt_ids == _rendered(tok, asked, reasoning_effort="high")
    gw.close_session(info.id)
    sid, client = _client(gw)
    with pytest.raises(openai.BadRequestError, match=r"reasoning\.effort"):
        client.responses.create(model="oss", input="x",
                                reasoning={"effort": 3})
    assert gw.trajectory(sid).turns == 0
    gw.close_session(sid)


def test_a_template_without_an_effort_ignores_it(gateway: Any, script: Any, tok: Any,
                                                 backend: Any) -> None:
    assert not gateway.reads_effort  # Qwen3's template reads enable_thinking, not an effort
    script.use(lambda ids, text: [*encode(tok, answer_text("Fine.")), tok.eos_token_id])
    seen = []
    for efforts in (("high", "low"), (None, None)):
        sid, client = _client(gateway)
        backend.requests.clear()
        asked = [{"reasoning": {"effort": e}} if e else {} for e in efforts]
        one = client.responses.create(model="tiny", input="Hi.", **asked[0])
        client.responses.create(model="tiny", input="And?", previous_response_id=one.id,
                                **asked[1])
        seen.append(([r.prompt_ids for r in backend.requests], gateway.trajectory(sid)))
        gateway.close_session(sid)
    (with_effort, traj), (without, plain) = seen
    assert with_effort == without and len(with_effort) == 2
    assert [r.prompt_ids for r in traj.rows] == [r.prompt_ids for r in plain.rows]
