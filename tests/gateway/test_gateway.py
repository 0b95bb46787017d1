"""The capture gateway end to end: agents written with the OpenAI and Anthropic SDKs play a
real ORS environment (the bundled Counter through ``OrsEnv``) while their model calls go
through the gateway, served by uvicorn, to a stand-in token backend.

The backend answers scripted completions over a tiny tokenizer with Qwen3's real chat
template; the first completion of an episode is given as a non-canonical split, so a
gateway re-encoding the text would record other ids. Every assertion reads the backend's
own record of what it was asked and what it answered.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import openai
import pytest
from _tiny_lm import answer_text, encode, non_canonical, tool_call_text

from ors_gym import OrsEnv
from ors_gym.gateway import as_batch, capture
from ors_gym.tokens import Trajectory
from tests._fault_servers import wait_for
from tests._token_server import token_logprob
from tests.gateway._agents import (
    anthropic_episode,
    counter_model,
    openai_episode,
    sampled_runs,
)

COUNTER = "ors_gym.envs.counter:Counter"


def qwen3_writer(tok: Any, *, odd_first: bool = True) -> Any:
    """Qwen3-format replies as ids; an episode's first turn split non-canonically."""

    def write(calls: tuple[tuple[str, dict[str, Any]], ...], content: str, think: str) -> Any:
        if calls:
            ((name, args),) = calls
            text = tool_call_text(name, args, think=think)
        else:
            text = answer_text(content, think=think)
        ids = [*encode(tok, text), tok.eos_token_id]
        return non_canonical(tok, ids) if odd_first and "to go" in think else ids

    return write


def check_verbatim(traj: Trajectory, asked: list[Any], tok: Any) -> None:
    """Each sampled run of each row is what the backend answered for a prompt that is the
    row's ids up to it, with the backend's logprobs; nothing else is masked in."""
    answered = [r for r in asked if r.ids]
    k = 0
    for row in traj.rows:
        ids = row.ids
        for start, end in sampled_runs(row):
            request = answered[k]
            at = len(row.prompt_ids) + start
            assert request.prompt_ids == ids[:at]  # the prompt is a prefix of its row
            assert row.completion_ids[start:end] == request.ids  # verbatim
            assert row.logprobs[start:end] == [
                token_logprob(t, at + i) for i, t in enumerate(request.ids)]
            k += 1
        assert sum(row.mask) == sum(e - s for s, e in sampled_runs(row))
        assert all(lp == 0.0 for lp, m in zip(row.logprobs, row.mask, strict=True) if not m)
    assert k == len(answered), "a sampled turn is missing from the trajectory"


@pytest.fixture
def env() -> Any:
    with OrsEnv(env_class=COUNTER) as e:
        yield e


def test_openai_agent_trajectory_has_the_sampled_ids_and_the_ors_return(
    gateway: Any, backend: Any, script: Any, tok: Any, env: Any
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    game = capture(env, gateway)
    session = None
    traj, info = openai_episode(game, _openai(gateway, game, _peek := []), task={"target": 7})
    session = _peek[0]
    assert traj.reward == 1.0 and traj.rewards == [0.0, 0.0, 1.0]
    assert traj.stop_reason == "completed" and traj.turns == 3 and len(traj.rows) == 1
    check_verbatim(traj, backend.requests, tok)
    first = backend.requests[0].ids
    assert first != encode(tok, tok.decode(first))  # the non-canonical split survived
    # The tool calls went to the environment: 5 then 2 reached the target of 7.
    calls = [m["tool_calls"] for m in traj.messages if m.get("tool_calls")]
    assert [c[0]["function"]["name"] for c in calls] == ["increment", "increment"]
    assert info["capture"].id == session.id and session.id not in gateway.sessions
    # The exports read the same row.
    row = traj.rows[0]
    assert traj.to_trl()["completion_ids"] == row.completion_ids
    assert traj.to_trl()["env_mask"] == row.mask
    assert traj.to_verl()["reward_score"] == 1.0
    assert traj.to_skyrl()["loss_masks"] == row.mask


def _openai(gateway: Any, game: Any, peek: list[Any]) -> Any:
    """An OpenAI client that points at the capture session opened by each reset (as an
    agent reading info['capture'] would)."""

    class Client:
        @property
        def chat(self) -> Any:
            session = game._episodes.session
            if not peek or peek[-1].id != session.id:
                peek.append(session)
            return openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key,
                                 max_retries=0).chat

    return Client()


@pytest.mark.parametrize("harness", ["drop_reasoning", "reserialize"])
def test_an_echo_rewritten_by_the_harness_still_continues_the_row(
    gateway: Any, backend: Any, script: Any, tok: Any, env: Any, harness: str
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    game = capture(env, gateway)
    traj, _ = openai_episode(game, _openai(gateway, game, []), task={"target": 9},
                             **{harness: True})
    assert len(traj.rows) == 1 and traj.turns == 3 and traj.reward == 1.0
    # the record keeps each turn as sampled, whatever the harness echoed
    turns = [m for m in traj.messages if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in turns] == ["9 to go.", "4 to go.", "It is reached."]
    check_verbatim(traj, backend.requests, tok)


def test_anthropic_agent_plays_the_same_episode(
    gateway: Any, backend: Any, script: Any, tok: Any, env: Any
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    game = capture(env, gateway)

    class Client:
        @property
        def messages(self) -> Any:
            session = game._episodes.session
            return anthropic.Anthropic(base_url=session.anthropic_base_url,
                                       api_key=session.api_key, max_retries=0).messages

    traj, _ = anthropic_episode(game, Client(), task={"target": 4})
    assert traj.reward == 1.0 and len(traj.rows) == 1 and traj.turns == 2
    check_verbatim(traj, backend.requests, tok)
    backend.requests.clear()
    streamed, _ = anthropic_episode(game, Client(), task={"target": 4}, stream=True)
    assert [r.ids for r in streamed.rows] == [r.ids for r in traj.rows]
    assert [r.mask for r in streamed.rows] == [r.mask for r in traj.rows]
    assert [r.logprobs for r in streamed.rows] == [r.logprobs for r in traj.rows]


def test_streaming_and_unstreamed_record_the_same_trajectory(
    gateway: Any, script: Any, tok: Any, env: Any
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    game = capture(env, gateway)
    plain, _ = openai_episode(game, _openai(gateway, game, []), task={"target": 6})
    streamed, _ = openai_episode(game, _openai(gateway, game, []), task={"target": 6},
                                 stream=True)
    assert plain.to_dict() == streamed.to_dict()
    assert plain.turns == 3 and plain.reward == 1.0


def _chat(session: Any, messages: list[dict[str, Any]], tools: list[Any]) -> Any:
    client = openai.OpenAI(base_url=session.openai_base_url, api_key=session.api_key,
                           max_retries=0)
    return client.chat.completions.create(model="tiny", messages=messages, tools=tools)


TOOLS = [{"type": "function", "function": {"name": "increment", "description": "Add.",
          "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}}}}]


def _two_turns(gateway: Any, script: Any, tok: Any) -> tuple[Any, list[dict[str, Any]]]:
    script.use(counter_model(qwen3_writer(tok, odd_first=False)))
    session = gateway.open_session()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You count."},
        {"role": "user", "content": "The counter is at 0. Make it equal 8 using increment."}]
    reply = _chat(session, messages, TOOLS).choices[0].message
    messages += [reply.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": reply.tool_calls[0].id,
                  "content": "The counter is now 5."}]
    reply = _chat(session, messages, TOOLS).choices[0].message
    messages += [reply.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": reply.tool_calls[0].id,
                  "content": "The counter is now 8."}]
    return session, messages


@pytest.mark.parametrize("rewrite", ["compaction", "edited", "dropped", "tools"])
def test_a_rewritten_history_starts_a_new_row(
    gateway: Any, backend: Any, script: Any, tok: Any, rewrite: str
) -> None:
    session, messages = _two_turns(gateway, script, tok)
    before = gateway.trajectory(session.id)
    assert len(before.rows) == 1 and before.turns == 2
    tools = TOOLS
    if rewrite == "compaction":
        messages = [messages[0], {"role": "user", "content": "Summary. The counter is at 8. "
                                  "Make it equal 8 using increment."}]
    elif rewrite == "edited":
        messages[1] = {"role": "user", "content": "The counter is at 0. Make it equal 8, "
                       "please."}
    elif rewrite == "dropped":
        del messages[0]
    else:
        tools = [*TOOLS, {"type": "function", "function": {"name": "reset",
                          "description": "Zero.", "parameters": {"type": "object"}}}]
    _chat(session, messages, tools)
    traj = gateway.close_session(session.id, [1.0])
    gateway.drop_session(session.id)
    assert len(traj.rows) == 2 and traj.turns == 3 and traj.reward == 1.0
    first = traj.rows[0]
    assert first.ids[: len(before.rows[0].ids)] == before.rows[0].ids  # kept as it was
    assert first.mask[: len(before.rows[0].mask)] == before.rows[0].mask
    # The new row is the request's conversation as the template renders it.
    assert traj.rows[1].prompt_ids == gateway.bridge.prompt(
        [m for m in traj.messages[:-1]], tools)
    check_verbatim(traj, backend.requests, tok)
    assert [len(s) for s in as_batch([traj])["completion_ids"]] == [
        len(r.completion_ids) for r in traj.rows]


def test_sixteen_sessions_at_once_stay_apart(
    gateway: Any, backend: Any, script: Any, tok: Any
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    backend.gate.clear()  # the backend holds every answer until all 16 first turns arrived

    def play(target: int) -> Trajectory:
        with OrsEnv(env_class=COUNTER) as env:
            game = capture(env, gateway)
            traj, _ = openai_episode(game, _openai(gateway, game, []), task={"target": target})
            return traj

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(play, 3 + i) for i in range(16)]
        wait_for(lambda: backend.in_flight == 16 or any(f.done() for f in futures),
                 timeout=60, what="16 first turns held at the backend")
        backend.gate.set()
        trajectories = [f.result() for f in futures]
    assert backend.max_in_flight == 16  # all first turns were at the backend at once
    for i, traj in enumerate(trajectories):
        assert f"Make it equal {3 + i} using" in traj.messages[0]["content"]
        assert traj.reward == 1.0 and len(traj.rows) == 1
        mine = [r for r in backend.requests if r.prompt_ids[:len(traj.rows[0].prompt_ids)]
                == traj.rows[0].prompt_ids]
        check_verbatim(traj, mine, tok)
    batch = as_batch(trajectories)
    assert batch["reward"] == [1.0] * 16 and batch["episode"] == list(range(16))


def test_the_session_api_over_http_and_the_api_key_alone(
    gateway: Any, script: Any, tok: Any
) -> None:
    script.use(counter_model(qwen3_writer(tok)))
    with httpx.Client(base_url=gateway.url) as http:
        opened = http.post("/sessions").json()
        assert opened["api_key"] not in repr(gateway.info(opened["id"]))
        assert opened["openai_base_url"] == f"{gateway.url}/s/{opened['id']}/v1"
        # A harness that can set only its key: the plain /v1 path finds the session by it.
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=opened["api_key"],
                               max_retries=0)
        assert [m.id for m in client.models.list()] == ["tiny"]
        client.chat.completions.create(model="tiny", tools=TOOLS, messages=[
            {"role": "user", "content": "The counter is at 0. Make it equal 2."}])
        read = http.get(f"/sessions/{opened['id']}").json()
        assert read["rows"][0]["mask"].count(1) > 0 and read["reward"] == 0.0
        closed = http.post(f"/sessions/{opened['id']}/close", json={"rewards": [0.5, 0.5]})
        traj = Trajectory.from_dict(closed.json())
        assert traj.reward == 1.0 and traj.rows[0].ids == read["rows"][0]["prompt_ids"] + \
            read["rows"][0]["completion_ids"]
        assert http.delete(f"/sessions/{opened['id']}").status_code == 204
        assert http.get(f"/sessions/{opened['id']}").status_code == 404


def test_json_round_trip_keeps_every_field(gateway: Any, script: Any, tok: Any) -> None:
    session, _ = _two_turns(gateway, script, tok)
    traj = gateway.close_session(session.id, [0.0, 1.0])
    gateway.drop_session(session.id)
    back = Trajectory.from_dict(json.loads(json.dumps(traj.to_dict())))
    assert back.to_trl() == traj.to_trl() and back.to_skyrl() == traj.to_skyrl()
    assert back.messages == traj.messages and back.reward == 1.0


def test_the_chat_template_bridge_captures_the_same_episode(
    tok: Any, backend: Any, script: Any, env: Any
) -> None:
    """renderer='template': the tokenizer's own template, proven append-only per turn."""
    from ors_gym.gateway import Gateway, GatewayThread
    from ors_gym.sampling import VllmCompletions

    script.use(counter_model(qwen3_writer(tok)))
    gw = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny",
                 renderer="template")
    assert gw.bridge.name == "template"
    with GatewayThread(gw):
        game = capture(env, gw)
        traj, _ = openai_episode(game, _openai(gw, game, []), task={"target": 8},
                                 drop_reasoning=True)
    assert traj.reward == 1.0 and len(traj.rows) == 1 and traj.turns == 3
    check_verbatim(traj, backend.requests, tok)


def test_the_command_line_serves_until_stopped(tmp_path: Any, tok: Any, backend: Any) -> None:
    """``ors-gym gateway --port 0`` binds, says where (the shared ``serve_forever``), and
    serves a session opened there."""
    import os
    import queue
    import subprocess
    import sys
    import threading

    tok.save_pretrained(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ors_gym", "gateway", "--tokenizer", str(tmp_path), "--backend",
         "vllm", "--backend-url", backend.base_url, "--model", "tiny", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout

    def pump() -> None:
        for printed in out:
            lines.put(printed)

    threading.Thread(target=pump, daemon=True).start()
    try:
        line = lines.get(timeout=120)  # a bound on a start, not a wait standing in for one
        assert line.startswith("ors-gym: gateway for tiny (") and " at http://" in line
        url = line.rsplit(" at ", 1)[1].strip()
        with httpx.Client(base_url=url, timeout=30) as http:
            opened = http.post("/sessions").json()
            assert opened["openai_base_url"] == f"{url}/s/{opened['id']}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
