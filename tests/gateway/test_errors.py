"""Bad requests get the wire's own error shape and status, and leave the trajectory as it was.

Each case is sent raw (so the exact status and body are read) to a session that already
holds a turn, for both wires; the SDKs read the same answers into their own exceptions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from _tiny_lm import answer_text, encode

from ors_gym.gateway import Gateway, GatewayThread
from ors_gym.sampling import VllmCompletions
from tests._token_server import Fail

USER = {"role": "user", "content": "The counter is at 0. Make it equal 1."}
OPENAI_TOOL = {"type": "function", "function": {"name": "increment", "parameters": {}}}

# (name, wire, body change, status)
CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("n", "openai", {"n": 2}, 400),
    ("tool_choice", "openai", {"tool_choice": "required"}, 400),
    ("forced_function", "openai",
     {"tool_choice": {"type": "function", "function": {"name": "increment"}}}, 400),
    ("web_search_tool", "openai", {"tools": [{"type": "web_search"}]}, 400),
    ("stop", "openai", {"stop": ["\n"]}, 400),
    ("no_messages", "openai", {"messages": []}, 400),
    ("bad_message", "openai", {"messages": [{"role": "wizard", "content": "x"}]}, 400),
    ("prefill", "openai", {"messages": [USER, {"role": "assistant", "content": "I"}]}, 400),
    ("any_tool", "anthropic", {"tool_choice": {"type": "any"}}, 400),
    ("server_tool", "anthropic",
     {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400),
    ("stop_sequences", "anthropic", {"stop_sequences": ["x"]}, 400),
    ("bad_block", "anthropic",
     {"messages": [{"role": "user", "content": [{"type": "video"}]}]}, 400),
]


def _body(wire: str, change: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny", "messages": [USER]}
    if wire == "anthropic":
        body["max_tokens"] = 64
    return {**body, **change}


def _path(session: Any, wire: str) -> str:
    return f"/s/{session.id}/v1/" + ("chat/completions" if wire == "openai" else "messages")


def _check_shape(response: httpx.Response, wire: str, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    if wire == "openai":
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["message"]
    else:
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    return dict(body)


@pytest.fixture(scope="module")
def small(tok: Any, backend: Any) -> Iterator[Gateway]:
    """A gateway whose model reads 48 tokens at most."""
    gw = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny",
                 context_length=48)
    with GatewayThread(gw):
        yield gw


@pytest.fixture
def held(gateway: Any, script: Any, tok: Any) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A session holding one turn, and its trajectory as JSON."""
    script.use(lambda ids, text: [*encode(tok, answer_text("One.")), tok.eos_token_id])
    session = gateway.open_session()
    with httpx.Client(base_url=gateway.url) as http:
        assert http.post(_path(session, "openai"), json=_body("openai", {})).status_code == 200
    yield session, gateway.trajectory(session.id).to_dict()
    gateway.drop_session(session.id)


@pytest.mark.parametrize(("name", "wire", "change", "status"), CASES,
                         ids=[c[0] for c in CASES])
def test_a_refused_option_is_answered_in_the_wire_shape(
    gateway: Any, held: tuple[Any, dict[str, Any]], name: str, wire: str,
    change: dict[str, Any], status: int,
) -> None:
    session, before = held
    with httpx.Client(base_url=gateway.url) as http:
        _check_shape(http.post(_path(session, wire), json=_body(wire, change)), wire, status)
    assert gateway.trajectory(session.id).to_dict() == before


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_malformed_bodies_and_unknown_sessions(
    gateway: Any, held: tuple[Any, dict[str, Any]], wire: str
) -> None:
    session, before = held
    with httpx.Client(base_url=gateway.url) as http:
        _check_shape(http.post(_path(session, wire), content=b"{not json"), wire, 400)
        _check_shape(http.post(_path(session, wire), json=["a list"]), wire, 400)
        plain = "/v1/" + ("chat/completions" if wire == "openai" else "messages")
        body = _check_shape(http.post("/s/nope/v1/chat/completions" if wire == "openai"
                                      else "/s/nope/v1/messages", json=_body(wire, {})),
                            wire, 404)
        if wire == "openai":
            assert body["error"]["code"] == "session_not_found"
        else:
            assert body["error"]["type"] == "not_found_error"
        _check_shape(http.post(plain, json=_body(wire, {}),
                               headers={"Authorization": "Bearer sk-ors-unknown"}), wire, 404)
        _check_shape(http.post(plain, json=_body(wire, {})), wire, 404)  # no key at all
    assert gateway.trajectory(session.id).to_dict() == before


def test_a_backend_failure_is_a_502_and_records_nothing(
    gateway: Any, script: Any, held: tuple[Any, dict[str, Any]]
) -> None:
    session, before = held
    script.use(lambda ids, text: Fail(500, "the GPU caught fire"))
    client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key,
                           max_retries=0)
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(model="tiny", messages=[USER])
    assert raised.value.status_code == 502 and "GPU caught fire" in str(raised.value)
    messages = anthropic.Anthropic(base_url=session.anthropic_base_url,
                                   api_key=session.api_key, max_retries=0).messages
    with pytest.raises(anthropic.APIStatusError) as failed:
        messages.create(model="tiny", max_tokens=32, messages=[USER])
    assert failed.value.status_code == 502
    assert gateway.trajectory(session.id).to_dict() == before


def test_a_prompt_over_the_context_length(small: Gateway, script: Any, tok: Any) -> None:
    script.use(lambda ids, text: [*encode(tok, answer_text("One.")), tok.eos_token_id])
    session = small.open_session()
    long = {"role": "user", "content": "The counter is at 0. " * 40}
    client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key,
                           max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="tiny", messages=[long])
    assert raised.value.code == "context_length_exceeded"
    messages = anthropic.Anthropic(base_url=session.anthropic_base_url,
                                   api_key=session.api_key, max_retries=0).messages
    with pytest.raises(anthropic.BadRequestError, match="context length"):
        messages.create(model="tiny", max_tokens=8, messages=[long])
    assert small.trajectory(session.id).rows == []
    # a short prompt is served, its completion capped at what the context leaves
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user",
                                                                      "content": "Hi"}])
    assert reply.usage is not None
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens <= 48


def test_a_closed_session_takes_no_more_turns(gateway: Any, held: tuple[Any, dict[str, Any]]
                                              ) -> None:
    session, _ = held
    closed = gateway.close_session(session.id, [1.0]).to_dict()
    client = anthropic.Anthropic(base_url=session.anthropic_base_url, api_key=session.api_key,
                                 max_retries=0)
    with pytest.raises(anthropic.NotFoundError, match="closed"):
        client.messages.create(model="tiny", max_tokens=32, messages=[USER])
    assert gateway.trajectory(session.id).to_dict() == closed
    with pytest.raises(ValueError, match="stop_reason"):
        gateway.close_session(session.id, [1.0], stop_reason="finished")


def _png() -> str:
    import base64
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (28, 28), "red").save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def test_a_vision_models_gateway_refuses_images(backend: Any, script: Any) -> None:
    """``processor=`` (here in the tokenizer's place) reaches the family's renderer, but a
    token sampler takes ids, no pixels: a request holding an image, in a user turn or a tool
    result, is refused in each wire's shape; nothing is sampled or recorded."""
    from _families import family_tokenizer
    from _processors import qwen_processor

    proc = qwen_processor(family_tokenizer("qwen3.5"))
    gw = Gateway(proc, VllmCompletions(backend.base_url, "tiny"), model="vl")
    assert gw.tokenizer is proc.tokenizer and gw.processor is proc and gw.bridge.multimodal
    png = _png()
    shown = {"role": "user", "content": [
        {"type": "text", "text": "What is here?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}]}
    returned = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
        "content": [{"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": png}}]}]}
    with GatewayThread(gw), httpx.Client(base_url=gw.url) as http:
        session = gw.open_session()
        body = _check_shape(http.post(_path(session, "openai"),
                                      json=_body("openai", {"messages": [shown]})), "openai", 400)
        assert body["error"]["code"] == "images_not_supported"
        assert "1 image(s)" in body["error"]["message"]
        call = {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "look", "input": {}}]}
        body = _check_shape(http.post(_path(session, "anthropic"), json=_body(
            "anthropic", {"messages": [USER, call, returned]})), "anthropic", 400)
        assert "token sampler takes prompt ids only" in body["error"]["message"]
        assert gw.trajectory(session.id).turns == 0
    assert backend.requests == []
