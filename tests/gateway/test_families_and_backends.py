"""The gateway over another model family (GLM-4.5: XML-style calls, its own end-of-call
token), over SGLang's ``/generate`` and a local transformers model, for a hosted
environment whose own agent is pointed at it by ``env_overrides``, and from the command line.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from _families import completion, family_tokenizer

from ors_gym import AsyncOrsEnv, OrsEnv
from ors_gym.cli import build_parser
from ors_gym.cli.args import UsageError
from ors_gym.cli.gateway import build_gateway
from ors_gym.gateway import Gateway, GatewayThread, TransformersSampler, capture
from ors_gym.sampling import SglangGenerate
from tests._token_server import TokenServer
from tests.gateway._agents import counter_model, openai_episode
from tests.gateway.test_gateway import COUNTER, check_verbatim

GLM = "glm-4.5"


class _Client:
    """An OpenAI client for the capture session the wrapped env opened last."""

    def __init__(self, game: Any) -> None:
        self.game = game

    @property
    def chat(self) -> Any:
        session = self.game._episodes.session
        return openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key,
                             max_retries=0).chat


@pytest.fixture(scope="module")
def glm() -> Iterator[tuple[Any, TokenServer, Gateway]]:
    tok = family_tokenizer(GLM)

    def write(calls: Any, content: str, think: str) -> str:
        return completion(GLM, calls, content=content, think=think)

    with TokenServer(tok, counter_model(write)) as server:
        from ors_gym.sampling import VllmCompletions

        gw = Gateway(tok, VllmCompletions(server.base_url, "glm"), model="glm")
        with GatewayThread(gw):
            yield tok, server, gw


def test_a_second_family_reads_its_own_calls_and_keeps_its_ids(
    glm: tuple[Any, TokenServer, Gateway]
) -> None:
    tok, server, gw = glm
    assert gw.bridge.family.name == GLM
    with OrsEnv(env_class=COUNTER) as env:
        game = capture(env, gw)
        traj, _ = openai_episode(game, _Client(game), task={"target": 4}, stream=True)
    assert traj.reward == 1.0 and traj.turns == 2 and len(traj.rows) == 1
    check_verbatim(traj, server.requests, tok)
    # the call turn ended on GLM's <|observation|>, sampled and kept
    assert server.requests[0].ids[-1] == tok.convert_tokens_to_ids("<|observation|>")
    (called,) = [m for m in traj.messages if m.get("tool_calls")]
    assert called["tool_calls"][0]["function"]["name"] == "increment"
    assert called["reasoning_content"] == "4 to go."


def test_sglang_backend_and_an_async_env(tok: Any, backend: Any, script: Any) -> None:
    from tests.gateway.test_gateway import qwen3_writer

    script.use(counter_model(qwen3_writer(tok)))
    gw = Gateway(tok, SglangGenerate(backend.base_url), model="tiny", max_in_flight=1)

    async def play() -> Any:
        env = AsyncOrsEnv(env_class=COUNTER)
        try:
            game = capture(env, gw)
            await game.reset(options={"task_spec": {"target": 2}})
            session = game._episodes.session
            client = openai.AsyncOpenAI(base_url=session.openai_base_url,
                                        api_key=session.api_key, max_retries=0)
            from ors_gym.formats import assistant_turn, render_messages

            messages = render_messages(await env.messages(), "openai")
            reply = await client.chat.completions.create(
                model="tiny", messages=messages, tools=env.tools_as("openai"))
            turn = assistant_turn(reply.choices[0].message, step=1)
            _, _, terminated, _, info = await game.step(turn)
            assert not terminated and game._episodes.session is not None
            _, _, terminated, _, info = await game.step("Done.")  # the agent stops here
            assert terminated
            return info["trajectory"]
        finally:
            await env.close()

    with GatewayThread(gw):
        import asyncio

        traj = asyncio.run(play())
    assert [r.path for r in backend.requests] == ["/generate"]
    assert traj.reward == 1.0 and traj.turns == 1
    check_verbatim(traj, backend.requests, tok)


def test_a_local_transformers_model(tok: Any) -> None:
    from _tiny_lm import tiny_model

    sampler = TransformersSampler(tiny_model(tok), tok)
    gw = Gateway(tok, sampler, model="tiny", max_tokens=12)
    with GatewayThread(gw):
        session = gw.open_session()
        client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key,
                               max_retries=0)
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hi"}], temperature=0)
    traj = gw.close_session(session.id, [0.0])
    row = traj.rows[0]
    assert reply.usage is not None and sum(row.mask) == reply.usage.completion_tokens <= 12
    assert len(row.logprobs) == len(row.completion_ids)
    assert all(lp <= 0.0 for lp, m in zip(row.logprobs, row.mask, strict=True) if m)
    assert any(lp < 0.0 for lp in row.logprobs)


def test_a_hosted_environment_gets_the_session_through_env_overrides(
    monkeypatch: pytest.MonkeyPatch, gateway: Gateway, backend: Any, script: Any, tok: Any
) -> None:
    from ors_gym.serving import ServerThread
    from tests._fault_servers import UvicornThread
    from tests._front_door import FrontDoor
    from tests._platform import DEPLOYMENT, KEY, Platform
    from tests.gateway.test_gateway import qwen3_writer

    script.use(counter_model(qwen3_writer(tok)))
    with ServerThread([COUNTER]) as tools:
        platform = Platform(KEY, FrontDoor({DEPLOYMENT: tools.url}, KEY))
        with UvicornThread(platform) as srv:
            for var in ("OPENREWARD_API_URL", "OPENREWARD_SESSION_URL", "OPENREWARD_URL"):
                monkeypatch.setenv(var, srv.url)
            monkeypatch.setenv("OPENREWARD_API_KEY", KEY)
            given = {"OTHER_VAR": "kept"}
            with OrsEnv(deployment=DEPLOYMENT, env_overrides=given) as env:
                game = capture(env, gateway)

                class HostedAgent:
                    """The environment's own agent: it reads only the variables it got."""

                    @property
                    def chat(self) -> Any:
                        sent = [r.json() for r in platform.requests("/create_session")
                                if r.json()][-1]["env"]
                        return openai.OpenAI(base_url=sent["OPENAI_BASE_URL"],
                                             api_key=sent["OPENAI_API_KEY"],
                                             max_retries=0).chat

                task = env.task(0, "train")
                traj, info = openai_episode(game, HostedAgent(), task=task)
    sent = [r.json() for r in platform.requests("/create_session") if r.json()]
    assert sent[-1] == {"env": {**given, **info["capture"].env()}}
    assert traj.reward == 1.0 and len(traj.rows) == 1
    check_verbatim(traj, backend.requests, tok)
    assert info["capture"].api_key not in repr(env) + repr(info["capture"])


def test_the_command_line_builds_a_gateway(tmp_path: Any, tok: Any, backend: Any) -> None:
    tok.save_pretrained(tmp_path)
    args = build_parser().parse_args([
        "gateway", "--tokenizer", str(tmp_path), "--backend", "vllm", "--backend-url",
        backend.base_url, "--model", "tiny", "--port", "0", "--chat-template-kwargs",
        '{"enable_thinking": false}'])
    gw = build_gateway(args)
    assert gw.bridge.family.name == "qwen3" and gw.model == "tiny"
    assert gw.sampler.endpoint == f"{backend.base_url}/v1/completions"
    for wrong, says in ((["--backend", "sglang"], "needs --backend-url"),
                        (["--chat-template-kwargs", "[1]"], "JSON object")):
        bad = argparse.Namespace(**{**vars(args), "backend_url": None if "sglang" in wrong
                                    else args.backend_url, "backend": wrong[1]
                                    if wrong[0] == "--backend" else "vllm",
                                    "chat_template_kwargs": wrong[1]
                                    if wrong[0] != "--backend" else None})
        with pytest.raises(UsageError, match=says):
            build_gateway(bad)



def test_requests_in_flight_are_bounded(tok: Any, backend: Any, script: Any) -> None:
    from _tiny_lm import answer_text, encode

    from ors_gym.sampling import VllmCompletions
    from tests._fault_servers import wait_for

    script.use(lambda ids, text: [*encode(tok, answer_text("Hi.")), tok.eos_token_id])
    gw = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny", max_in_flight=2)
    backend.gate.clear()
    with GatewayThread(gw), ThreadPoolExecutor(6) as pool:
        sessions = [gw.open_session() for _ in range(6)]
        futures = [pool.submit(openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key,
                                             max_retries=0).chat.completions.create,
                               model="tiny", messages=[{"role": "user", "content": "Hi"}])
                   for s in sessions]
        wait_for(lambda: backend.in_flight == 2, what="two requests held at the backend")
        backend.gate.set()
        replies = [f.result() for f in futures]
    assert backend.max_in_flight == 2 and len(backend.requests) == 6
    assert all(r.choices[0].message.content == "Hi." for r in replies)
    assert all(gw.trajectory(s.id).turns == 1 for s in sessions)


@pytest.mark.parametrize("shape", ["vllm", "sglang"])
def test_a_backend_without_logprobs_records_the_turn_without_them(
    tok: Any, backend: Any, script: Any, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that answers no logprobs although asked: the turn is served and recorded
    (its ids verbatim), the trajectory says ``logprobs_given=False``, and one WARNING."""
    import logging

    from _tiny_lm import answer_text, encode

    from ors_gym.sampling import VllmCompletions

    answer = [*encode(tok, answer_text("Hi.")), tok.eos_token_id]
    script.use(lambda ids, text: answer)
    sampler = (VllmCompletions(backend.base_url, "tiny") if shape == "vllm"
               else SglangGenerate(backend.base_url))
    gw = Gateway(tok, sampler, model="tiny")
    backend.logprobs = False
    try:
        with GatewayThread(gw), caplog.at_level(logging.WARNING, logger="ors_gym"):
            session = gw.open_session()
            client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key,
                                   max_retries=0)
            messages: list[Any] = [{"role": "user", "content": "Say hi."}]
            for _ in range(2):
                reply = client.chat.completions.create(model="tiny", messages=messages)
                assert reply.choices[0].message.content == "Hi."
                messages += [{"role": "assistant", "content": "Hi."},
                             {"role": "user", "content": "Again."}]
            traj = gw.trajectory(session.id)
    finally:
        backend.logprobs = True
    sent = backend.requests[0].body  # they were asked for
    assert sent["logprobs"] == 0 if shape == "vllm" else sent["return_logprob"] is True
    assert traj.logprobs_given is False and traj.turns == 2
    for row in traj.rows:  # the sampled ids verbatim, logprob 0.0 in place of the missing
        sampled = [t for t, m in zip(row.completion_ids, row.mask, strict=True) if m]
        assert sampled == answer * row.turns and set(row.logprobs) == {0.0}
    assert traj.to_trl()["logprobs"] is None
    told = [r.getMessage() for r in caplog.records if "without logprobs" in r.getMessage()]
    assert len(told) == 1, told


def test_the_command_line_takes_a_processor(tmp_path: Any, tok: Any, backend: Any) -> None:
    """``--processor`` is loaded and given to the gateway: a folder holding a tokenizer only
    is refused, naming what processor= takes."""
    tok.save_pretrained(tmp_path)
    args = build_parser().parse_args([
        "gateway", "--tokenizer", str(tmp_path), "--processor", str(tmp_path),
        "--backend-url", backend.base_url])
    assert args.processor == str(tmp_path)
    with pytest.raises(UsageError, match="processor= takes a multimodal processor"):
        build_gateway(args)
    missing = argparse.Namespace(**{**vars(args), "processor": str(tmp_path / "nowhere")})
    with pytest.raises(UsageError, match=r"--processor .*nowhere"):
        build_gateway(missing)


def test_health_answers_without_a_key_and_opens_nothing(tok: Any, backend: Any) -> None:
    import httpx

    from ors_gym.sampling import VllmCompletions

    gw = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny")
    with GatewayThread(gw, admin_key="admin-k") as served, httpx.Client() as http:
        answer = http.get(f"{served.url}/health")
        assert answer.status_code == 200 and answer.json() == {"status": "ok", "model": "tiny"}
        assert http.post(f"{served.url}/sessions").status_code == 401  # the API still asks
    assert gw.sessions == []
