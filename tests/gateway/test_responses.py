"""The gateway's OpenAI Responses wire (``POST /v1/responses``) with the ``openai`` SDK:
``responses.create`` and ``responses.stream`` play the bundled Counter through the gateway
and record the trajectory Chat and Messages record; the reasoning goes out only as an
opaque handle; the stream is the event sequence the SDK assembles; refusals are OpenAI's
errors and leave the trajectory as it was.
"""

from __future__ import annotations

import gc
import json
import re
from typing import Any

import httpx
import openai
import pytest
from _families import FAMILIES, completion, family_tokenizer
from _tiny_lm import answer_text, encode, tool_call_text

from ors_gym import OrsEnv
from ors_gym.formats import assistant_turn, exchange_messages, render_messages, step_exchange
from ors_gym.gateway import Gateway, GatewayThread, capture
from ors_gym.sampling import VllmCompletions
from tests._token_server import TokenServer
from tests.gateway._agents import anthropic_episode, counter_model, openai_episode
from tests.gateway.test_gateway import COUNTER, check_verbatim, qwen3_writer


def responses_tools(chat_tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat function tools as Responses function tools."""
    return [{"type": "function", **t["function"]} for t in chat_tools]


def _text(content: Any) -> Any:
    """Chat content as Responses content (parts as ``input_text``)."""
    if isinstance(content, str):
        return content
    return [{"type": "input_text", "text": p["text"]} for p in content]


def responses_episode(env: Any, session: Any, *, task: dict[str, Any], mode: str = "create",
                      ) -> Any:
    """One Counter episode played through ``/v1/responses`` by an ``openai`` SDK agent.
    ``mode``: ``create`` (the history resent, output items echoed as the SDK gives them),
    ``stream`` (the same with ``responses.stream``), ``previous`` (only the new items, the
    rest by ``previous_response_id``), ``agents`` (as the Agents SDK sends it: items
    without ``type``, the reasoning items dropped from the echo, tool results as
    ``input_text`` parts)."""
    env.reset(options={"task_spec": task})
    client = openai.OpenAI(base_url=session().openai_base_url, api_key=session().api_key,
                           max_retries=0)
    core = env.unwrapped
    chat = render_messages(core.messages(), "openai")
    tools = responses_tools(core.tools_as("openai"))
    options: dict[str, Any] = {"model": "tiny", "tools": tools}
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer" if m["role"] == "system" else m["role"],
         "content": _text(m["content"])} for m in chat]
    if mode == "agents":
        items = [{"role": m["role"], "content": m["content"]} for m in items]
    new = list(items)
    previous = None
    for step in range(1, 20):
        if mode == "stream":
            with client.responses.stream(input=items, **options) as events:
                reply = events.get_final_response()
        elif mode == "previous":
            reply = client.responses.create(input=new, previous_response_id=previous,
                                            **options)
            previous = reply.id
        else:
            reply = client.responses.create(input=items, store=False,
                                            include=["reasoning.encrypted_content"], **options)
        output = [o.model_dump(exclude_none=True) for o in reply.output]
        items += [o for o in output if mode != "agents" or o["type"] != "reasoning"]
        calls = [o for o in output if o["type"] == "function_call"]
        message: dict[str, Any] = {"role": "assistant", "content": reply.output_text or None}
        if calls:
            message["tool_calls"] = [{"id": c["call_id"], "type": "function", "function": {
                "name": c["name"], "arguments": c["arguments"]}} for c in calls]
        turn = assistant_turn(message, step=step)
        _, _, terminated, truncated, info = env.step(turn)
        if terminated or truncated:
            return info["trajectory"]
        results = render_messages([exchange_messages(step_exchange(turn, info))[1]], "openai")
        new = [{"type": "function_call_output", "call_id": r["tool_call_id"],
                "output": _text(r["content"]) if mode != "agents" else [
                    {"type": "input_text", "text": str(r["content"])}]} for r in results]
        items += new
    raise AssertionError("the episode did not end")


@pytest.fixture
def env() -> Any:
    with OrsEnv(env_class=COUNTER) as e:
        yield e


def test_the_same_episode_through_chat_messages_and_responses(
    gateway: Any, backend: Any, script: Any, tok: Any, env: Any
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    game = capture(env, gateway)

    def session() -> Any:
        return game._episodes.session

    class Chat:
        @property
        def chat(self) -> Any:
            return openai.OpenAI(base_url=session().openai_base_url,
                                 api_key=session().api_key, max_retries=0).chat

    class Messages:
        @property
        def messages(self) -> Any:
            import anthropic

            return anthropic.Anthropic(base_url=session().anthropic_base_url,
                                       api_key=session().api_key, max_retries=0).messages

    task = {"target": 7}
    via_chat, _ = openai_episode(game, Chat(), task=task)
    assert via_chat.reward == 1.0 and via_chat.turns == 3 and len(via_chat.rows) == 1
    via_messages, _ = anthropic_episode(game, Messages(), task=task)
    assert via_messages.to_dict() == via_chat.to_dict()
    for mode in ("create", "stream", "previous", "agents"):
        backend.requests.clear()
        traj = responses_episode(game, session, task=task, mode=mode)
        assert traj.to_dict() == via_chat.to_dict(), mode
        check_verbatim(traj, backend.requests, tok)  # the backend's own ids, one row


def _turn(tok: Any, think: str = "Two to go.") -> Any:
    def write(ids: list[int], text: str) -> list[int]:
        return [*encode(tok, tool_call_text("increment", {"amount": 2}, think=think)),
                tok.eos_token_id]

    return write


TOOLS = [{"type": "function", "name": "increment", "description": "Add.",
          "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}}}]


def _client(session: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key,
                         max_retries=0)


def test_the_reasoning_goes_out_as_a_handle_and_comes_back_through_it(
    gateway: Any, backend: Any, script: Any, tok: Any
) -> None:
    script.use(_turn(tok, think="Secret plan."))
    session = gateway.open_session()
    client = _client(session)
    reply = client.responses.create(model="tiny", input="Count to 2.", tools=TOOLS)
    reasoning, call = reply.output
    assert reasoning.type == "reasoning" and reasoning.summary == [] and not reasoning.content
    handle = reasoning.encrypted_content
    assert handle and "Secret" not in handle and "plan" not in json.dumps(
        reply.model_dump())  # nowhere in clear
    assert call.type == "function_call" and json.loads(call.arguments) == {"amount": 2}
    assert reply.usage.input_tokens == len(backend.requests[0].prompt_ids)
    assert reply.usage.output_tokens == len(backend.requests[0].ids)
    # asked for (reasoning.summary), the text is given in clear
    asked = client.responses.create(model="tiny", input="Count to 2.", tools=TOOLS,
                                    reasoning={"summary": "auto"})
    assert asked.output[0].summary[0].text == "Secret plan."
    # A history that dropped the reasoning's text but kept its handle is rendered with
    # it: a new row (the user message was edited) shows the recorded reasoning.
    edited = [{"role": "user", "content": "Count to 3."},
              reasoning.model_dump(exclude_none=True), call.model_dump(exclude_none=True),
              {"type": "function_call_output", "call_id": call.call_id, "output": "now 2"}]
    client.responses.create(model="tiny", input=edited, tools=TOOLS)
    prompt = tok.decode(backend.requests[-1].prompt_ids)
    assert "Secret plan." in prompt and "Count to 3." in prompt
    gateway.drop_session(session.id)


def _events(url: str, key: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events of a streamed response, read raw: (``event:`` name, data)."""
    out = []
    with httpx.stream("POST", f"{url}/responses", json=body,
                      headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        assert http.status_code == 200, http.read()
        name = None
        for line in http.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.append((name or "", json.loads(line[6:])))
    return out


def test_the_stream_is_the_sdks_event_sequence_and_ends_with_completed(
    gateway: Any, backend: Any, script: Any, tok: Any
) -> None:
    script.use(lambda ids, text: [*encode(tok, answer_text("Hi.", think="Greet.")),
                                  tok.eos_token_id])
    session = gateway.open_session()
    events = _events(session.openai_base_url, session.api_key, {
        "model": "tiny", "input": "Hello", "stream": True, "reasoning": {"summary": "auto"}})
    assert all(name == data["type"] for name, data in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert [name for name, _ in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    done = events[-1][1]["response"]
    assert done["status"] == "completed" and done["id"] == events[0][1]["response"]["id"]
    assert [i["type"] for i in done["output"]] == ["reasoning", "message"]
    assert done["output"][1]["content"][0]["text"] == "Hi."
    # the SDK assembles the same stream into the same response
    with _client(session).responses.stream(model="tiny", input="Hello") as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert texts == ["Hi."] and final.output_text == "Hi."
    # a turn cut at max_output_tokens still ends with response.completed, incomplete
    cut = _events(session.openai_base_url, session.api_key, {
        "model": "tiny", "input": "Hello", "stream": True, "max_output_tokens": 3})
    assert cut[-1][0] == "response.completed"
    assert cut[-1][1]["response"]["status"] == "incomplete"
    assert cut[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert cut[-1][1]["response"]["usage"]["output_tokens"] == 3
    gateway.drop_session(session.id)


def test_a_turn_that_fails_mid_stream_ends_with_response_failed(
    tok: Any, backend: Any, script: Any
) -> None:
    script.use(lambda ids, text: [*encode(tok, answer_text("Hi.")), tok.eos_token_id])
    gw = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny",
                 context_length=40)
    with GatewayThread(gw):
        session = gw.open_session()
        events = _events(session.openai_base_url, session.api_key, {
            "model": "tiny", "input": "Hello " * 50, "stream": True})
        assert [n for n, _ in events] == ["response.created", "response.in_progress",
                                          "response.failed"]
        failed = events[-1][1]["response"]
        assert failed["status"] == "failed"
        assert failed["error"]["code"] == "context_length_exceeded"
        assert "context length of 40" in failed["error"]["message"]
        with pytest.raises(openai.BadRequestError, match="context length") as caught:
            _client(session).responses.create(model="tiny", input="Hello " * 50)
        assert caught.value.code == "context_length_exceeded"
        assert gw.trajectory(session.id).rows == [] and not backend.requests


@pytest.mark.parametrize(("body", "says", "param"), [
    ({"tool_choice": "required"}, "only 'auto' is served", "tool_choice"),
    ({"tools": [{"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}]},
     "type 'custom' (apply_patch)", "tools[0]"),
    ({"tools": [{"type": "web_search"}]}, "web_search = \"disabled\"", "tools[0]"),
    ({"tools": [{"type": "namespace", "name": "mcp__x", "description": "",
                 "tools": [{"type": "custom", "name": "edit"}]}]},
     "tools[0].tools[0] has type 'custom'", "tools[0].tools[0]"),
    ({"previous_response_id": "resp_unknown"}, "not a response this session stored",
     "previous_response_id"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}},
     "'json_schema' is not supported", "text.format"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "has type 'item_reference'",
     "input[0]"),
    ({"max_output_tokens": 0}, "max_output_tokens must be a positive", "max_output_tokens"),
    ({"conversation": "conv_1"}, "server-side conversations", "conversation"),
    ({"input": []}, "'input' must be a non-empty list", "input"),
])
def test_what_the_gateway_cannot_serve_is_a_400_and_changes_nothing(
    gateway: Any, script: Any, tok: Any, body: dict[str, Any], says: str, param: str
) -> None:
    script.use(_turn(tok))
    session = gateway.open_session()
    client = _client(session)
    client.responses.create(model="tiny", input="Count to 2.", tools=TOOLS)
    before = gateway.trajectory(session.id).to_dict()
    request = {"model": "tiny", "input": "Count to 2.", "tools": TOOLS, **body}
    with pytest.raises(openai.BadRequestError, match=re.escape(says)) as caught:
        client.responses.create(**request)
    assert caught.value.status_code == 400 and caught.value.param == param
    with pytest.raises(openai.BadRequestError, match=re.escape(says)):  # streamed: refused up front
        client.responses.create(**request, stream=True)
    assert gateway.trajectory(session.id).to_dict() == before
    gateway.drop_session(session.id)


def test_a_response_sent_with_store_false_is_not_kept(
    gateway: Any, script: Any, tok: Any
) -> None:
    script.use(_turn(tok))
    session = gateway.open_session()
    client = _client(session)
    kept = client.responses.create(model="tiny", input="Count to 2.", tools=TOOLS)
    unkept = client.responses.create(model="tiny", input="Count to 2.", tools=TOOLS,
                                     store=False)
    follow = [{"type": "function_call_output", "call_id": kept.output[-1].call_id,
               "output": "The counter is now 2."}]
    client.responses.create(model="tiny", input=follow, tools=TOOLS,
                            previous_response_id=kept.id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="tiny", input=follow, tools=TOOLS,
                                previous_response_id=unkept.id)
    assert caught.value.code == "previous_response_not_found"
    # another session's key does not reach this session's responses
    other = _client(gateway.open_session())
    with pytest.raises(openai.BadRequestError):
        other.responses.create(model="tiny", input=follow, tools=TOOLS,
                               previous_response_id=kept.id)
    with pytest.raises(openai.NotFoundError, match="no capture session"):
        openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-wrong",
                      max_retries=0).responses.create(model="tiny", input="Hi")
    # the stored responses go with their session
    from ors_gym.gateway import responses

    assert session.id in responses._STORED
    gateway.drop_session(session.id)
    gc.collect()
    assert session.id not in responses._STORED


def test_instructions_are_the_system_message_chat_sends(
    gateway: Any, backend: Any, script: Any, tok: Any
) -> None:
    script.use(_turn(tok))
    chat_tools = [{"type": "function", "function": {
        k: v for k, v in TOOLS[0].items() if k != "type"}}]
    prompts = []
    for send in (
        lambda c: c.chat.completions.create(model="tiny", tools=chat_tools, messages=[
            {"role": "system", "content": "You count."},
            {"role": "user", "content": "Count to 2."}]),
        lambda c: c.responses.create(model="tiny", tools=TOOLS, instructions="You count.",
                                     input="Count to 2."),
        lambda c: c.responses.create(model="tiny", tools=TOOLS, input=[
            {"role": "developer", "content": "You count."},
            {"role": "user", "content": [{"type": "input_text", "text": "Count to 2."}]}]),
    ):
        session = gateway.open_session()
        send(_client(session))
        prompts.append(backend.requests[-1].prompt_ids)
        gateway.drop_session(session.id)
    assert prompts[0] == prompts[1] == prompts[2]
    assert "You count." in tok.decode(prompts[0])


class _Clients:
    """The OpenAI and Anthropic SDK clients of the session the wrapped env opened last."""

    def __init__(self, game: Any) -> None:
        self.game = game

    def session(self) -> Any:
        return self.game._episodes.session

    @property
    def chat(self) -> Any:
        return _client(self.session()).chat

    @property
    def messages(self) -> Any:
        import anthropic

        return anthropic.Anthropic(base_url=self.session().anthropic_base_url,
                                   api_key=self.session().api_key, max_retries=0).messages


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_records_one_trajectory_through_the_three_wires(name: str) -> None:
    tok = family_tokenizer(name)

    def write(calls: Any, content: str, think: str) -> str:
        if name == "deepseek-v3":  # R1's template opens <think> at the generation prompt
            return f"{think}\n</think>\n\n" + completion(name, calls, content=content)
        if name in ("kimi-k2", "llama-3"):  # templates with no reasoning block
            return completion(name, calls, content=content)
        return completion(name, calls, content=content, think=think)

    with TokenServer(tok, counter_model(write)) as server:
        gw = Gateway(tok, VllmCompletions(server.base_url, name), model=name)
        with GatewayThread(gw), OrsEnv(env_class=COUNTER) as env:
            game = capture(env, gw)
            clients = _Clients(game)
            via_chat, _ = openai_episode(game, clients, task={"target": 6})
            assert via_chat.reward == 1.0 and via_chat.turns == 3
            # R1's template writes no generation prompt after a tool result: a row a turn
            assert len(via_chat.rows) == (3 if name == "deepseek-v3" else 1)
            via_messages, _ = anthropic_episode(game, clients, task={"target": 6}, stream=True)
            server.requests.clear()
            via_responses = responses_episode(game, clients.session, task={"target": 6},
                                              mode="stream")
    assert via_messages.to_dict() == via_chat.to_dict()
    assert via_responses.to_dict() == via_chat.to_dict()
    check_verbatim(via_responses, server.requests, tok)
