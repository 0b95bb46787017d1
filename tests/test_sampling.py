"""``ors_gym.sampling``: vLLM's and SGLang's token endpoints, against the suite's stand-in.

The stand-in (``tests/_token_server.py``) is a real HTTP server answering scripted
completions over the tiny tokenizer with deterministic logprobs; each test checks
what the sampler sent (the recorded request) and what it read back (ids, logprobs,
finish reason), and how it reports a refusal or a server that is down.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import socket
import threading
from typing import Any

import pytest

from ors_gym.sampling import (
    Sample,
    SamplingError,
    SglangGenerate,
    TokenSampler,
    VllmCompletions,
    sample_all,
)

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs the trl extra: pip install 'ors-gym[trl]'", allow_module_level=True)

from tests._tiny_lm import encode, non_canonical, tiny_tokenizer
from tests._token_server import Fail, TokenServer, token_logprob


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_tokenizer()


def _prompt(tok: Any, text: str = "What is the capital of France?") -> list[int]:
    return list(tok.apply_chat_template([{"role": "user", "content": text}],
                                        add_generation_prompt=True, tokenize=True,
                                        return_dict=False))


def _samplers(url: str) -> list[TokenSampler]:
    return [VllmCompletions(url, "tiny", seed=7), SglangGenerate(url)]


@pytest.mark.parametrize("shape", ["vllm", "sglang"])
def test_both_shapes_return_the_sampled_ids_and_their_logprobs(tok: Any, shape: str) -> None:
    end = tok.convert_tokens_to_ids("<|im_end|>")
    prompt = _prompt(tok)
    reply = encode(tok, "Paris<|im_end|>\nnot sampled")
    with TokenServer(tok, [reply]) as srv:
        sampler = _samplers(srv.base_url)[0 if shape == "vllm" else 1]

        async def go() -> Sample:
            try:
                return await sampler.sample(prompt, max_tokens=32, stop_token_ids=[end],
                                            temperature=0.7, top_p=0.9)
            finally:
                await sampler.aclose()

        sample = asyncio.run(go())
    cut = reply[: reply.index(end) + 1]  # the stop id kept, nothing after it
    assert sample == Sample(cut, [token_logprob(t, len(prompt) + i) for i, t in enumerate(cut)],
                            "stop")
    (req,) = srv.requests
    assert req.prompt_ids == prompt
    if shape == "vllm":
        assert req.path == "/v1/completions"
        body = {k: req.body[k] for k in ("model", "max_tokens", "temperature", "top_p",
                                         "return_token_ids", "skip_special_tokens",
                                         "stop_token_ids", "logprobs", "seed")}
        assert body == {"model": "tiny", "max_tokens": 32, "temperature": 0.7, "top_p": 0.9,
                        "return_token_ids": True, "skip_special_tokens": False,
                        "stop_token_ids": [end], "logprobs": 0, "seed": 7}
    else:
        assert req.path == "/generate"
        assert req.body["return_logprob"] is True
        assert req.body["sampling_params"] == {
            "max_new_tokens": 32, "temperature": 0.7, "top_p": 0.9, "stop_token_ids": [end],
            "skip_special_tokens": False, "no_stop_trim": True}


@pytest.mark.parametrize("shape", ["vllm", "sglang"])
def test_non_canonical_ids_come_back_verbatim_and_length_is_reported(tok: Any,
                                                                     shape: str) -> None:
    odd = non_canonical(tok, encode(tok, "The capital is Paris"))
    with TokenServer(tok, [odd, "a long answer that goes past the limit"]) as srv:
        sampler = _samplers(srv.base_url)[0 if shape == "vllm" else 1]

        async def go() -> tuple[Sample, Sample]:
            try:
                first = await sampler.sample([1, 2, 3], max_tokens=64, logprobs=False)
                second = await sampler.sample([1, 2, 3], max_tokens=3)
                return first, second
            finally:
                await sampler.aclose()

        first, second = asyncio.run(go())
    assert first == Sample(odd, None, "stop")
    assert tok.decode(first.ids) == "The capital is Paris"
    assert second.finish_reason == "length" and len(second.ids) == 3
    assert second.ids == encode(tok, "a long answer that goes past the limit")[:3]
    sent = srv.requests[0].body
    assert (sent["logprobs"] is None) if shape == "vllm" else (sent["return_logprob"] is False)


@pytest.mark.parametrize("shape", ["vllm", "sglang"])
def test_a_refusal_names_the_endpoint_the_status_and_the_reason(tok: Any, shape: str) -> None:
    with TokenServer(tok, [Fail(400, "This model's maximum context length is 8 tokens")]) as srv:
        sampler = _samplers(srv.base_url)[0 if shape == "vllm" else 1]
        path = "/v1/completions" if shape == "vllm" else "/generate"
        with pytest.raises(SamplingError, match=rf"POST {srv.base_url}{path} answered 400: "
                                                r".*maximum context length is 8"):
            asyncio.run(sampler.sample([1, 2], max_tokens=4))
    assert len(srv.requests) == 1  # a refusal is not resent


class _ReadThenClose:
    """A loopback HTTP/1.1 server for one connection: it answers the first request as vLLM
    does (kept alive), reads the second whole, then closes without a byte of answer (a
    server that died while sampling; to the client, just like a connection closed while
    idle)."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = json.dumps(answer).encode()
        self.bodies: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _read(self, conn: socket.socket, buffer: bytearray) -> None:
        while b"\r\n\r\n" not in buffer:
            buffer += conn.recv(65536)
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += conn.recv(65536)
        self.bodies.append(rest[:length])
        buffer[:] = rest[length:]

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            buffer = bytearray()
            self._read(conn, buffer)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(self.answer), self.answer))
            self._read(conn, buffer)  # the second request, read whole; then closed

    def close(self) -> None:
        self._listener.close()
        self._thread.join(timeout=10)


def test_a_request_the_server_read_is_never_sent_again(tok: Any) -> None:
    """The server reads a request on a kept-alive connection and closes it unanswered: to
    the client that is also how a connection closed while idle looks, but an inference
    server sends nothing until it has sampled, so the request is not sent again (its
    tokens may be paid for): a SamplingError says so."""
    ids = encode(tok, "a")
    server = _ReadThenClose({"choices": [{"token_ids": ids, "finish_reason": "stop",
                                          "logprobs": {"token_logprobs": [-0.5] * len(ids)}}]})
    # bounded: a resend would go to a second connection, which this server never answers
    sampler = VllmCompletions(server.url, "tiny", timeout=30.0)

    async def go() -> Sample:
        try:
            first = await sampler.sample([1, 2, 3], max_tokens=4)
            with pytest.raises(SamplingError, match=r"after the request was sent.*not resent"):
                await sampler.sample([7, 7, 7], max_tokens=4)
            return first
        finally:
            await sampler.aclose()

    try:
        assert asyncio.run(go()).ids == ids
    finally:
        server.close()
    assert [json.loads(b)["prompt"] for b in server.bodies] == [[1, 2, 3], [7, 7, 7]]


def test_a_server_that_is_down_is_retried_with_a_warning_then_named(
        caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sampler = VllmCompletions(f"http://127.0.0.1:{port}/v1", "tiny", api_key="sk-secret-123")
    assert sampler.endpoint == f"http://127.0.0.1:{port}/v1/completions"
    with caplog.at_level(logging.WARNING, logger="ors_gym"), \
            pytest.raises(SamplingError, match=rf"127.0.0.1:{port}/v1/completions: could not "
                                               r"connect after 4 attempts"):
        asyncio.run(sampler.sample([1], max_tokens=1))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3 and all("could not connect" in w for w in warnings)
    assert "sk-secret" not in repr(sampler) + " ".join(warnings)


def test_requests_in_flight_are_bounded_and_the_api_key_is_sent(tok: Any) -> None:
    with TokenServer(tok, ["a"] * 6) as srv:
        srv.gate.clear()
        sampler = VllmCompletions(srv.base_url, "tiny", api_key="sk-k", max_in_flight=2)

        async def go() -> list[Sample]:
            tasks = [asyncio.create_task(sampler.sample([i + 1], max_tokens=4))
                     for i in range(6)]
            for _ in range(2000):  # until the bound is reached (the server holds answers)
                if srv.in_flight == 2:
                    break
                await asyncio.sleep(0.005)
            srv.gate.set()
            try:
                return await asyncio.gather(*tasks)
            finally:
                await sampler.aclose()

        samples = asyncio.run(go())
    assert srv.max_in_flight == 2 and len(samples) == 6
    assert all(s.ids == encode(tok, "a") for s in samples)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="base_url must be an http"):
        SglangGenerate("localhost:30000")
    with pytest.raises(ValueError, match="max_in_flight must be at least 1"):
        VllmCompletions("http://127.0.0.1:1", "m", max_in_flight=0)
    with pytest.raises(ValueError, match="model must name the served model"):
        VllmCompletions("http://127.0.0.1:1", "")
    assert isinstance(SglangGenerate("http://127.0.0.1:1"), TokenSampler)


@pytest.mark.parametrize("shape", ["vllm", "sglang"])
def test_sample_all_asks_for_every_prompt_at_once_each_with_its_budget(
        tok: Any, shape: str) -> None:
    """Two prompts held at the server together (its gate opens once both arrived): each
    answer is its own prompt's, in the prompts' order, cut at its own budget."""
    end = tok.convert_tokens_to_ids("<|im_end|>")
    paris, tokyo = encode(tok, "Paris<|im_end|>"), encode(tok, "Tokyo is big<|im_end|>")
    with TokenServer(tok, {"France": [paris], "Japan": [tokyo]}) as srv:
        sampler = _samplers(srv.base_url)[0 if shape == "vllm" else 1]
        srv.gate.clear()

        async def go() -> list[Sample]:
            async def release() -> None:
                while srv.in_flight < 2:
                    await asyncio.sleep(0.01)  # polls the server's count; no timing premise
                srv.gate.set()

            try:
                got, _ = await asyncio.gather(
                    sample_all(sampler, [_prompt(tok), _prompt(tok, "The capital of Japan?")],
                               max_tokens=[32, 2], stop_token_ids=[end]),
                    asyncio.wait_for(release(), 20.0))
                return got
            finally:
                await sampler.aclose()

        samples = asyncio.run(go())
    assert [s.ids for s in samples] == [paris, tokyo[:2]]
    assert [s.finish_reason for s in samples] == ["stop", "length"]
    assert srv.max_in_flight == 2


def test_sample_all_uses_a_samplers_own_batch_call_and_checks_its_answer() -> None:
    class Batched:
        def __init__(self, answers: int) -> None:
            self.calls: list[tuple[list[list[int]], list[int]]] = []
            self.answers = answers

        async def sample(self, prompt_ids: Any, **_: Any) -> Sample:
            raise AssertionError("sample_all asks a batch sampler once per turn")

        async def sample_batch(self, prompts: Any, *, max_tokens: Any, **_: Any) -> list[Sample]:
            self.calls.append(([list(p) for p in prompts], list(max_tokens)))
            return [Sample([7], None, "length")] * self.answers

        async def aclose(self) -> None:
            return None

    good = Batched(2)
    got = asyncio.run(sample_all(good, [[1], [2, 3]], max_tokens=[4, 5]))
    assert good.calls == [([[1], [2, 3]], [4, 5])] and len(got) == 2
    with pytest.raises(SamplingError, match="answered 1 samples for 2 prompts"):
        asyncio.run(sample_all(Batched(1), [[1], [2]], max_tokens=[4, 5]))
    with pytest.raises(ValueError, match="max_tokens has 1 budgets for 2 prompts"):
        asyncio.run(sample_all(good, [[1], [2]], max_tokens=[4]))
    assert asyncio.run(sample_all(good, [], max_tokens=[])) == []


def test_a_local_model_stops_at_the_first_stop_id_with_one_logprob_per_id(tok: Any) -> None:
    """Greedy, so both runs sample the same ids: the run told to stop at the second sampled
    id ends there ("stop"), with the first run's logprobs for the ids it kept."""
    from ors_gym.sampling import TransformersSampler
    from tests._tiny_lm import tiny_model

    sampler = TransformersSampler(tiny_model(tok, seed=0), tok)
    prompt = _prompt(tok)
    never = [tok.pad_token_id]  # a stop id a greedy run of this model does not reach

    async def go() -> tuple[Sample, Sample]:
        free = await sampler.sample(prompt, max_tokens=4, stop_token_ids=never, temperature=0.0)
        assert len(free.ids) == 4 and free.finish_reason == "length", free
        cut = await sampler.sample(prompt, max_tokens=4, stop_token_ids=[free.ids[1]],
                                   temperature=0.0)
        await sampler.aclose()
        return free, cut

    free, cut = asyncio.run(go())
    kept = free.ids[: free.ids.index(free.ids[1]) + 1]
    assert cut.ids == kept and cut.finish_reason == "stop"
    assert cut.logprobs == pytest.approx(free.logprobs[: len(kept)])
