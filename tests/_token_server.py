"""A token-in/token-out inference server for the tests, answering scripted completions.

Real HTTP under uvicorn on 127.0.0.1 (an ephemeral port), serving vLLM's
``POST /v1/completions`` (``prompt`` as ids, ``return_token_ids``, ``logprobs``,
``stop_token_ids``) and SGLang's ``POST /generate`` (``input_ids``, ``sampling_params``,
``return_logprob``) in their own answer shapes. ``script`` says what to answer:

- a sequence: one queue of replies, taken in arrival order;
- a mapping from a text to a queue: the first key (longest first) found in the decoded
  prompt picks the queue;
- a callable ``script(prompt_ids, prompt_text) -> reply``.

A reply is a text (encoded with the test's tokenizer), a list of ids (kept verbatim, so
a non-canonical encoding stays one), or a ``Fail(status)`` answered as that HTTP error.
The reply is cut after the first of the request's stop ids (kept) and then at
``max_tokens`` (finish "length"; otherwise "stop"). Every completion token's logprob is
``token_logprob(id, position)``, position counted from the prompt's start, so a test
computes the expected numbers itself (``logprobs = False``: none are given, even when
asked, as a server run without them answers). ``requests`` records each request (path, body,
arrival and answer times, the answered ids), ``gate`` (a ``threading.Event``) holds every
answer until set when a test needs one, and ``max_in_flight`` says how many were held at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests._fault_servers import UvicornThread

__all__ = ["Fail", "Recorded", "TokenServer", "token_logprob"]


@dataclass(frozen=True)
class Fail:
    """A scripted refusal: the request is answered with ``status`` and ``message``."""

    status: int
    message: str = "refused on purpose"


Reply = str | list[int] | Fail
Script = Sequence[Reply] | Mapping[str, Sequence[Reply]] | Callable[[list[int], str], Reply]


@dataclass
class Recorded:
    """One request as the server got it, and what it answered."""

    path: str
    body: dict[str, Any]
    prompt_ids: list[int]
    arrived: float  # time.monotonic() on arrival
    answered: float = 0.0
    ids: list[int] = field(default_factory=list)
    status: int = 200


def token_logprob(token_id: int, position: int) -> float:
    """The stand-in's logprob for ``token_id`` sampled at ``position`` (deterministic)."""
    return -((token_id * 7919 + position * 104729) % 997 + 1) / 1024.0


class TokenServer:
    """``with TokenServer(tokenizer, script) as srv: VllmCompletions(srv.base_url, "m")``."""

    def __init__(self, tokenizer: Any, script: Script) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.requests: list[Recorded] = []
        self.gate = threading.Event()
        self.gate.set()
        self.logprobs = True  # give logprobs when asked
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests held at once
        self._lock = threading.Lock()
        self._queues: dict[str | None, list[Reply]] = {}
        if isinstance(script, Mapping):
            self._queues = {key: list(replies) for key, replies in script.items()}
        elif not callable(script):
            self._queues = {None: list(script)}
        app = Starlette(routes=[Route("/v1/completions", self._vllm, methods=["POST"]),
                                Route("/generate", self._sglang, methods=["POST"])])
        self._thread = UvicornThread(app)

    @property
    def base_url(self) -> str:
        return self._thread.url

    def __enter__(self) -> TokenServer:
        self._thread.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.set()
        self._thread.__exit__(*exc)

    # -- the script ----------------------------------------------------------------------

    def _reply(self, prompt_ids: list[int]) -> Reply:
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        with self._lock:
            if callable(self.script) and not isinstance(self.script, (Mapping, Sequence)):
                return self.script(prompt_ids, text)
            keys = [k for k in self._queues if k is None or k in text]
            keys.sort(key=lambda k: -len(k or ""))
            for key in keys:
                if self._queues[key]:
                    return self._queues[key].pop(0)
        return Fail(500, f"the script has no reply left for a prompt ending {text[-80:]!r}")

    def _complete(self, path: str, body: dict[str, Any], prompt_ids: list[int], max_tokens: int,
                  stop_ids: Sequence[int]) -> tuple[Recorded, list[int], list[float], str] | Fail:
        record = Recorded(path, body, prompt_ids, time.monotonic())
        with self._lock:
            self.requests.append(record)
        reply = self._reply(prompt_ids)
        if isinstance(reply, Fail):
            record.status, record.answered = reply.status, time.monotonic()
            return reply
        ids = list(reply) if isinstance(reply, list) else self.tokenizer.encode(
            reply, add_special_tokens=False)
        for i, token in enumerate(ids):
            if token in stop_ids:
                ids = ids[: i + 1]
                break
        finish = "stop"  # a stop id, or the scripted reply's end
        if len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        start = len(prompt_ids)
        logprobs = [token_logprob(t, start + i) for i, t in enumerate(ids)]
        record.ids = ids
        return record, ids, logprobs, finish

    async def _held(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if not self.gate.is_set():
                await asyncio.to_thread(self.gate.wait, 30.0)
        finally:
            with self._lock:
                self.in_flight -= 1

    # -- the two shapes ------------------------------------------------------------------

    async def _vllm(self, request: Request) -> JSONResponse:
        body = await request.json()
        prompt = body.get("prompt")
        if not isinstance(prompt, list) or not all(isinstance(i, int) for i in prompt):
            return JSONResponse({"error": {"message": "prompt must be a list of ids here"}}, 400)
        done = self._complete("/v1/completions", body, prompt, int(body.get("max_tokens") or 16),
                              body.get("stop_token_ids") or [])
        await self._held()
        if isinstance(done, Fail):
            return JSONResponse({"error": {"message": done.message, "code": done.status}},
                                done.status)
        record, ids, logprobs, finish = done
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish,
                                  "token_ids": ids if body.get("return_token_ids") else None,
                                  "logprobs": None}
        if body.get("logprobs") is not None and self.logprobs:
            choice["logprobs"] = {"token_logprobs": logprobs,
                                  "tokens": [self.tokenizer.decode([t]) for t in ids]}
        record.answered = time.monotonic()
        return JSONResponse({"id": f"cmpl-{len(self.requests)}", "object": "text_completion",
                             "model": body.get("model"), "choices": [choice]})

    async def _sglang(self, request: Request) -> JSONResponse:
        body = await request.json()
        prompt = body.get("input_ids")
        params = body.get("sampling_params") or {}
        if not isinstance(prompt, list) or not all(isinstance(i, int) for i in prompt):
            return JSONResponse({"error": {"message": "input_ids must be a list of ids"}}, 400)
        done = self._complete("/generate", body, prompt, int(params.get("max_new_tokens") or 16),
                              params.get("stop_token_ids") or [])
        await self._held()
        if isinstance(done, Fail):
            return JSONResponse({"error": {"message": done.message}}, done.status)
        record, ids, logprobs, finish = done
        meta: dict[str, Any] = {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                                "finish_reason": {"type": finish}}
        if body.get("return_logprob") and self.logprobs:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, ids,
                                                                             strict=True)]
        record.answered = time.monotonic()
        return JSONResponse({"text": self.tokenizer.decode(ids, skip_special_tokens=False),
                             "output_ids": ids, "meta_info": meta})
