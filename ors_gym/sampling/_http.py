"""Inference servers as token samplers: vLLM's ``/v1/completions`` and SGLang's ``/generate``.

``VllmCompletions`` speaks vLLM's ``/v1/completions`` (the prompt as a list of ids,
``return_token_ids``), as TRL's asynchronous rollout worker does, and
``SglangGenerate`` speaks SGLang's native ``/generate`` (``input_ids``,
``return_logprob``). Both bound the requests in flight with a semaphore over one
connection pool of the package's (``pooled_transport``, which honours the proxy
variables as httpx does; requests go to it directly, without an ``httpx.AsyncClient``'s
layers), decode nothing (special tokens kept) and raise
``SamplingError`` naming the endpoint and the status on a refusal.

Retries: a request is resent only when it never reached the server (the connection
was refused or could not be opened), with a WARNING each time. Sampling has no side
effect on the server, but an answer lost after the request was sent (a read timeout, a
dropped connection, a kept-alive connection closed before any byte of the answer:
an inference server sends nothing until it has sampled, so that is no proof it never
read the request) is not resent: the tokens may already be paid for, and a caller
that wants another draw asks again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ors_gym.backends.http import pooled_transport
from ors_gym.sampling._protocol import FinishReason, Sample, SamplingError

logger = logging.getLogger("ors_gym")

__all__ = ["SglangGenerate", "VllmCompletions"]

#: Attempts for a request whose connection could not be opened (never sent).
_CONNECT_ATTEMPTS = 4
_BACKOFF_S = 0.05


class _HttpSampler:
    """The client, the in-flight bound and the error handling both servers share."""

    _path = ""

    def __init__(self, base_url: str, *, headers: Mapping[str, str] | None,
                 max_in_flight: int, timeout: float) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL such as 'http://127.0.0.1:8000', "
                             f"got {base_url!r}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.base_url = base_url.rstrip("/")
        self.max_in_flight = max_in_flight
        self._headers = [*(headers or {}).items(), ("Content-Type", "application/json")]
        self._timeout = timeout
        self._extensions = {"timeout": httpx.Timeout(timeout).as_dict()}
        self._client: httpx.AsyncBaseTransport | None = None
        self._gate: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._told_no_logprobs = False

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}{self._path}"

    def __repr__(self) -> str:  # no headers: they may carry the API key
        return f"{type(self).__name__}({self.endpoint!r}, max_in_flight={self.max_in_flight})"

    def _bind(self) -> tuple[httpx.AsyncBaseTransport, asyncio.Semaphore]:
        # The client and the semaphore belong to the loop that first samples; a closed
        # loop's are dropped (its connections cannot be used or closed from another loop).
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            if not self._loop.is_closed():
                raise RuntimeError(f"{self!r} is in use on another event loop; "
                                   "make one sampler per loop")
            self._client = self._gate = None
        if self._client is None or self._gate is None:
            # The package's own pool (asyncio-native, no anyio): less CPU a request than httpx's.
            n = self.max_in_flight
            self._client = pooled_transport(n, n, max_connections_per_host=n)
            self._gate = asyncio.Semaphore(self.max_in_flight)
            self._loop = loop
        return self._client, self._gate

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        client, gate = self._bind()
        content = json.dumps(body, separators=(",", ":")).encode()
        async with gate:
            for attempt in range(1, _CONNECT_ATTEMPTS + 1):
                request = httpx.Request("POST", self.endpoint, headers=self._headers,
                                        content=content, extensions=self._extensions)
                try:
                    response = await client.handle_async_request(request)
                    try:
                        await response.aread()
                    finally:
                        await response.aclose()
                    break
                except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                    if attempt == _CONNECT_ATTEMPTS:
                        raise SamplingError(
                            f"POST {self.endpoint}: could not connect after {attempt} "
                            f"attempts ({exc!r}); is the server up?") from exc
                    logger.warning("POST %s: could not connect (%r); retry %d/%d",
                                   self.endpoint, exc, attempt, _CONNECT_ATTEMPTS - 1)
                    await asyncio.sleep(_BACKOFF_S * 2 ** (attempt - 1))
                except httpx.TimeoutException as exc:
                    raise SamplingError(f"POST {self.endpoint}: no answer within "
                                        f"{self._timeout:g} s ({type(exc).__name__})") from exc
                except httpx.TransportError as exc:
                    raise SamplingError(f"POST {self.endpoint}: the connection failed after the "
                                        f"request was sent ({exc!r}); not resent") from exc
        if response.status_code != 200:
            raise SamplingError(f"POST {self.endpoint} answered {response.status_code}: "
                                f"{_detail(response)}")
        try:
            answer = response.json()
        except ValueError as exc:
            raise SamplingError(f"POST {self.endpoint} answered 200 with a body that is not "
                                f"JSON: {response.text[:200]!r}") from exc
        if not isinstance(answer, dict):
            raise SamplingError(f"POST {self.endpoint} answered 200 with {type(answer).__name__}, "
                                "expected a JSON object")
        return answer

    def _fail(self, what: str) -> SamplingError:
        return SamplingError(f"POST {self.endpoint}: {what}")

    def _check(self, ids: Any, logprobs: Any, asked: bool) -> tuple[list[int], list[float] | None]:
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise self._fail(f"the answer's token ids are not a list of ints: {ids!r:.200}")
        if not asked:
            return ids, None
        if logprobs is None:  # a server that gives none: the sample has none (logged once)
            if not self._told_no_logprobs:
                self._told_no_logprobs = True
                logger.warning("POST %s answered without logprobs although they were asked "
                               "for; its samples carry none (a trajectory's logprobs_given "
                               "is False)", self.endpoint)
            return ids, None
        if (not isinstance(logprobs, list) or len(logprobs) != len(ids)
                or not all(isinstance(x, (int, float)) for x in logprobs)):
            raise self._fail(f"expected one logprob per token ({len(ids)}), got {logprobs!r:.200}")
        return ids, [float(x) for x in logprobs]

    async def aclose(self) -> None:
        """Close the connection pool; the sampler can be used again afterwards (a new pool)."""
        client, self._client, self._gate, self._loop = self._client, None, None, None
        if client is not None:
            await client.aclose()


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return repr(response.text[:300])
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body.get("message", body)))
        if isinstance(error, dict):
            error = error.get("message", error)
        return repr(str(error)[:300])
    return repr(str(body)[:300])


def _finish(reason: Any) -> FinishReason:
    return reason if reason in ("stop", "length") else "abort"


class VllmCompletions(_HttpSampler):
    """vLLM's OpenAI-compatible ``/v1/completions`` with the prompt as ids.

    Sends ``return_token_ids`` and ``logprobs: 0`` (the sampled token's own logprob),
    ``skip_special_tokens: false`` and ``stop_token_ids``; reads ``choices[0].token_ids``
    and ``choices[0].logprobs.token_logprobs``. ``extra_body`` goes into every request
    (``top_k``, ``min_p``, ``repetition_penalty``, ``seed``...). ``base_url`` is the
    server's root (``http://host:8000``), with or without a trailing ``/v1``.
    """

    _path = "/v1/completions"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 max_in_flight: int = 64, timeout: float = 600.0, **extra_body: Any) -> None:
        root = base_url.rstrip("/") if isinstance(base_url, str) else base_url
        if isinstance(root, str) and root.endswith("/v1"):
            root = root[: -len("/v1")]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        super().__init__(root, headers=headers, max_in_flight=max_in_flight, timeout=timeout)
        if not model:
            raise ValueError("model must name the served model (vLLM's --served-model-name)")
        self.model = model
        self.extra_body = dict(extra_body)

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Sample:
        body: dict[str, Any] = {
            **self.extra_body,
            "model": self.model, "prompt": list(prompt_ids), "max_tokens": max_tokens,
            "temperature": temperature, "top_p": top_p, "n": 1,
            "return_token_ids": True, "skip_special_tokens": False,
            "stop_token_ids": list(stop_token_ids),
            "logprobs": 0 if logprobs else None,
        }
        answer = await self._post(body)
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._fail(f"the answer has no choices: {answer!r:.200}")
        choice = choices[0]
        if choice.get("token_ids") is None:
            raise self._fail("the answer has no token_ids; this needs a vLLM that knows "
                             "return_token_ids (0.10.2 or later)")
        lp = choice.get("logprobs") or {}
        ids, lps = self._check(choice["token_ids"],
                               lp.get("token_logprobs") if isinstance(lp, dict) else None,
                               logprobs)
        return Sample(ids, lps, _finish(choice.get("finish_reason")))


class SglangGenerate(_HttpSampler):
    """SGLang's native ``/generate`` with ``input_ids``.

    Sends ``sampling_params`` (``max_new_tokens``, ``stop_token_ids``,
    ``skip_special_tokens: false``, ``no_stop_trim: true`` so a matched stop id stays in
    the ids) and ``return_logprob``; reads ``output_ids`` and
    ``meta_info.output_token_logprobs`` (``[logprob, id, text]`` per token) and
    ``meta_info.finish_reason.type``.
    """

    _path = "/generate"

    def __init__(self, base_url: str, *, max_in_flight: int = 64, timeout: float = 600.0) -> None:
        super().__init__(base_url, headers=None, max_in_flight=max_in_flight, timeout=timeout)

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Sample:
        body: dict[str, Any] = {
            "input_ids": list(prompt_ids),
            "sampling_params": {
                "max_new_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
                "stop_token_ids": list(stop_token_ids), "skip_special_tokens": False,
                "no_stop_trim": True,
            },
            "return_logprob": logprobs,
        }
        answer = await self._post(body)
        meta = answer.get("meta_info")
        if not isinstance(meta, dict):
            raise self._fail(f"the answer has no meta_info: {answer!r:.200}")
        triples = meta.get("output_token_logprobs")
        ids = answer.get("output_ids")
        if logprobs and triples is not None:
            if not isinstance(triples, list) or not all(
                    isinstance(t, (list, tuple)) and len(t) >= 2 for t in triples):
                raise self._fail(f"meta_info.output_token_logprobs is not a list of "
                                 f"[logprob, id, ...]: {triples!r:.200}")
            if ids is None:  # older servers give the ids only beside the logprobs
                ids = [t[1] for t in triples]
            elif [t[1] for t in triples] != ids:
                raise self._fail("output_ids and output_token_logprobs name different tokens")
        lps = [t[0] for t in triples] if logprobs and triples is not None else None
        ids, lps = self._check(ids, lps, logprobs)
        reason = meta.get("finish_reason")
        return Sample(ids, lps, _finish(reason.get("type") if isinstance(reason, dict) else reason))
