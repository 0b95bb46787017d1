"""The gateway: capture sessions over one tokenizer, one bridge and one token sampler.

A :class:`Gateway` is used in-process (``open_session``, ``trajectory``,
``close_session``, ``drop_session``) and served as an ASGI app
(:func:`ors_gym.gateway.app.build_app`). One model turn (:meth:`Gateway.turn`): the
session's lock is taken (its turns run one at a time, sessions run concurrently), the
request's prompt is planned (append-only where it continues the row), a slot of
``max_in_flight`` is taken for the sampler, the completion is parsed by the family's
rules into the reply, and only then is the turn recorded.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ors_gym.gateway.errors import GatewayError
from ors_gym.gateway.replies import Reply
from ors_gym.gateway.requests import ReadMessages, TurnRequest
from ors_gym.gateway.session import CaptureSession
from ors_gym.sampling import Sample, TokenSampler
from ors_gym.tokens import Bridge, Trajectory, make_bridge, split_processor, stops

logger = logging.getLogger("ors_gym")

__all__ = ["Gateway", "SessionInfo", "SessionStatus"]


@dataclass(frozen=True)
class SessionInfo:
    """An open capture session: its id, its API key, and where an agent points its SDK
    (``openai_base_url`` for ``OpenAI(base_url=...)``, ``anthropic_base_url`` for
    ``Anthropic(base_url=...)``; None until the gateway's address is known)."""

    id: str
    api_key: str
    openai_base_url: str | None
    anthropic_base_url: str | None

    def env(self) -> dict[str, str]:
        """The variables an agent's SDKs read: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
        ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``."""
        if self.openai_base_url is None or self.anthropic_base_url is None:
            raise RuntimeError("the gateway's address is unknown: serve it (ors_gym.gateway."
                               "serve) or give Gateway(url=...) before asking for variables")
        return {"OPENAI_BASE_URL": self.openai_base_url, "OPENAI_API_KEY": self.api_key,
                "ANTHROPIC_BASE_URL": self.anthropic_base_url, "ANTHROPIC_API_KEY": self.api_key}

    def __repr__(self) -> str:  # the key is a credential: never shown
        return f"SessionInfo(id={self.id!r}, openai_base_url={self.openai_base_url!r})"


@dataclass(frozen=True)
class SessionStatus:
    """A capture session's state beside its trajectory: whether it is closed, its turns
    recorded, and its refused turns: ``context_overflows`` (refused for a prompt at or
    over the context length) and ``last_refusal`` (the error code of the last refused
    turn, e.g. ``"context_length_exceeded"``; None while none was)."""

    id: str
    closed: bool
    turns: int
    context_overflows: int
    last_refusal: str | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Gateway:
    """Capture sessions for one model: ``tokenizer`` (its family found as ``TokenEnv``
    finds it; ``renderer`` and ``chat_template_kwargs`` as ``TokenEnv`` takes them) and a
    :class:`~ors_gym.sampling.TokenSampler`. ``max_in_flight`` bounds the sampler calls
    at once; ``context_length`` (default: the tokenizer's ``model_max_length`` when set)
    refuses a longer prompt; ``max_tokens`` is a turn's budget when a request gives none.
    ``url`` is the address it is served at (``serve`` sets it); ``model`` is the name
    ``/v1/models`` lists. ``processor``: a vision-language model's processor (or one in
    the tokenizer's place), for its family's renderer, as ``TokenEnv`` takes it; a
    request holding images is then refused (400): a token sampler takes ids, no pixels.
    A request's reasoning effort is passed to the chat template as ``reasoning_effort``
    where the template reads it (:attr:`reads_effort`), else ignored; a changed effort
    starts a new row.
    """

    def __init__(
        self,
        tokenizer: Any,
        sampler: TokenSampler,
        *,
        renderer: Any = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        model: str = "ors-gym",
        max_in_flight: int = 64,
        context_length: int | None = None,
        max_tokens: int = 4096,
        url: str | None = None,
        processor: Any = None,
    ) -> None:
        if isinstance(max_in_flight, bool) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be a positive int, got {max_in_flight!r}")
        tokenizer, self.processor = split_processor(tokenizer, processor)
        self.tokenizer = tokenizer
        self.sampler = sampler
        self.bridge = make_bridge(tokenizer, renderer, chat_template_kwargs, self.processor)
        self._stop_ids = sorted(self.bridge.stops)  # every turn ends on the family's stops
        self._renderer, self._kwargs = renderer, dict(chat_template_kwargs or {})
        self._efforts: dict[str, Bridge] = {}
        self.reads_effort = _reads_effort(renderer, tokenizer, self.processor)
        self.model = model
        self.max_in_flight = max_in_flight
        self.max_tokens = max_tokens
        limit = getattr(tokenizer, "model_max_length", None)
        self.context_length = context_length or (
            limit if isinstance(limit, int) and limit < 10**8 else None)
        self.url = url.rstrip("/") if url else None
        self.vocab_size = len(tokenizer)
        self._sessions: dict[str, CaptureSession] = {}
        self._by_key: dict[str, str] = {}
        self._turn_locks: dict[str, asyncio.Lock] = {}
        self._readers: dict[str, ReadMessages] = {}
        self._lock = threading.Lock()
        self._slots: asyncio.Semaphore | None = None

    def __repr__(self) -> str:
        return (f"Gateway(model={self.model!r}, renderer={self.bridge.name!r}, "
                f"sessions={len(self._sessions)}, url={self.url!r})")

    # -- the trainer's side -------------------------------------------------------------
    def open_session(self) -> SessionInfo:
        """A new capture session: its id, key and base URLs."""
        session = CaptureSession.new(self.bridge.name)
        with self._lock:
            self._sessions[session.id] = session
            self._by_key[session.key] = session.id
        return self.info(session.id)

    def info(self, sid: str, url: str | None = None) -> SessionInfo:
        """Session ``sid``'s id, key and base URLs (at ``url``, default the gateway's)."""
        session = self._get(sid)
        root = (url or self.url or "").rstrip("/")
        base = f"{root}/s/{session.id}" if root else None
        return SessionInfo(session.id, session.key, base and f"{base}/v1", base)

    def trajectory(self, sid: str) -> Trajectory:
        """A copy of session ``sid``'s trajectory as recorded so far."""
        session = self._get(sid)
        with self._lock:
            return copy.deepcopy(session.trajectory)

    def status(self, sid: str) -> SessionStatus:
        """Session ``sid``'s state and refused turns (see :class:`SessionStatus`)."""
        session = self._get(sid)
        with self._lock:
            return SessionStatus(session.id, session.closed, session.trajectory.turns,
                                 session.context_overflows, session.last_refusal)

    def close_session(self, sid: str, rewards: Sequence[float] = (), *,
              stop_reason: str = "completed") -> Trajectory:
        """End session ``sid`` with its episode's ``rewards`` (each step's, the ORS return
        their sum): no more model requests are served for it; its trajectory (a copy) is
        returned and stays readable until :meth:`drop_session`."""
        if stop_reason not in stops.STOP_REASONS:
            raise ValueError(f"stop_reason={stop_reason!r}; choose one of {stops.STOP_REASONS}")
        session = self._get(sid)
        with self._lock:
            session.finish(self.bridge, list(rewards), stop_reason)
            return copy.deepcopy(session.trajectory)

    def drop_session(self, sid: str) -> None:
        """Forget session ``sid`` (open or closed)."""
        with self._lock:
            session = self._sessions.pop(sid, None)
            if session is None:
                raise GatewayError(404, f"no capture session {sid!r}")
            self._by_key.pop(session.key, None)
            self._turn_locks.pop(sid, None)
            self._readers.pop(sid, None)

    @property
    def sessions(self) -> list[str]:
        """The ids of the sessions held (open or closed, not dropped)."""
        with self._lock:
            return list(self._sessions)

    # -- the agent's side ----------------------------------------------------------------
    def find(self, sid: str | None, key: str | None) -> CaptureSession:
        """The session a request names: by its URL's ``sid``, else by its API key."""
        with self._lock:
            if sid is None and key is not None:
                sid = self._by_key.get(key)
            session = self._sessions.get(sid) if sid is not None else None
        if session is None:
            how = "the URL" if sid is not None else "the API key"
            raise GatewayError(404, f"no capture session is named by {how}: open one with "
                                    "POST /sessions (or Gateway.open_session) and use its "
                                    "base URL or key", code="session_not_found")
        if session.closed:
            raise GatewayError(404, f"capture session {session.id} is closed",
                               code="session_closed")
        return session

    def reader(self, session: CaptureSession) -> ReadMessages:
        """The reader of ``session``'s request messages (for ``read_request``)."""
        reader = self._readers.get(session.id)
        if reader is None:
            reader = self._readers[session.id] = ReadMessages()
        return reader

    async def turn(self, session: CaptureSession, request: TurnRequest) -> Reply:
        """Sample, parse and record one assistant turn for ``request`` (see the module); a
        refusal (:class:`GatewayError`) is kept in the session's :meth:`status`."""
        try:
            return await self._turn(session, request)
        except GatewayError as exc:
            with self._lock:
                session.refused(exc)
            raise

    async def _turn(self, session: CaptureSession, request: TurnRequest) -> Reply:
        if request.images and self.processor is not None:
            raise GatewayError(
                400, f"the request holds {request.images} image(s), but this gateway's "
                     "token sampler takes prompt ids only, not the pixels a vision model "
                     "reads: send text only, or collect vision episodes with TokenEnv "
                     "(processor=) or veRL's 'ors' agent loop", code="images_not_supported",
                param="messages")
        lock = self._turn_locks.setdefault(session.id, asyncio.Lock())
        async with lock:
            if session.closed:
                raise GatewayError(404, f"capture session {session.id} is closed",
                                   code="session_closed")
            effort = request.effort if self.reads_effort else None
            plan = session.plan(self._bridge_for(effort), request.messages, request.tools,
                                variant=effort)
            max_tokens = self._budget(len(plan.prompt), request.max_tokens or self.max_tokens)
            sample = await self._sample(plan.prompt, max_tokens, request)
            parsed = self.bridge.parse(plan.prompt, list(sample.ids), request.tools)
            turn = parsed.numbered(session.trajectory.turns + 1)
            reply = Reply(request.model or self.model, turn, sample.finish_reason,
                          len(plan.prompt), len(sample.ids))
            with self._lock:
                session.commit(self.bridge, plan, sample, turn)
            return reply

    def _bridge_for(self, effort: str | None) -> Bridge:
        """The bridge rendering with ``effort`` as the template's ``reasoning_effort``
        (the gateway's own bridge where none is asked); one per effort, kept."""
        if effort is None:
            return self.bridge
        bridge = self._efforts.get(effort)
        if bridge is None:
            kwargs = {**self._kwargs, _EFFORT: effort}
            try:
                bridge = make_bridge(self.tokenizer, self._renderer, kwargs, self.processor)
            except (TypeError, ValueError) as exc:  # e.g. a renderer's config names its values
                raise GatewayError(400, f"the reasoning effort {effort!r} is not one this "
                                        f"model's renderer takes: {exc}",
                                   param=_EFFORT) from exc
            self._efforts[effort] = bridge
        return bridge

    def _budget(self, prompt: int, asked: int) -> int:
        """The turn's token budget: what was asked, within what the context leaves."""
        if self.context_length is None:
            return asked
        budget = self.context_length - prompt
        if budget < 1:
            raise GatewayError(
                400, f"the prompt is {prompt} tokens, at or over the model's context length "
                     f"of {self.context_length}: shorten the conversation (compact it)",
                code="context_length_exceeded", param="messages")
        return min(asked, budget)

    async def _sample(self, prompt: list[int], max_tokens: int, request: TurnRequest) -> Sample:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_in_flight)
        async with self._slots:
            try:
                sample = await self.sampler.sample(
                    prompt, max_tokens=max_tokens,
                    stop_token_ids=self._stop_ids,
                    temperature=request.temperature, top_p=request.top_p, logprobs=True)
            except Exception as exc:
                logger.warning("the token backend failed a turn: %s: %s",
                               type(exc).__name__, exc)
                raise GatewayError(502, f"the token backend failed: {type(exc).__name__}: "
                                        f"{exc}") from exc
        problem = _check_sample(sample, self.vocab_size)
        if problem:
            logger.warning("the token backend gave an unusable sample: %s", problem)
            raise GatewayError(502, f"the token backend gave an unusable sample: {problem}")
        return sample

    def _get(self, sid: str) -> CaptureSession:
        with self._lock:
            session = self._sessions.get(sid)
        if session is None:
            raise GatewayError(404, f"no capture session {sid!r}", code="session_not_found")
        return session


#: The chat-template variable a request's reasoning effort is passed as.
_EFFORT = "reasoning_effort"


def _reads_effort(renderer: Any, tokenizer: Any, processor: Any) -> bool:
    """Whether a request's reasoning effort reaches the template: the gateway builds its
    bridge from the tokenizer's chat template (or a renderers name: ``make_bridge`` then
    gives a template or renderers bridge), and that template reads ``reasoning_effort``
    (gpt-oss's harmony template does; Qwen3's ``enable_thinking`` is another knob, set by
    ``chat_template_kwargs``)."""
    if processor is not None:
        return False  # a vision model's bridge: its processor renders
    if renderer is not None and not isinstance(renderer, str):
        return False  # a Bridge, a renderers config or Renderer: its kwargs are its own
    return _EFFORT in str(getattr(tokenizer, "chat_template", None) or "")


def _check_sample(sample: Sample, vocab_size: int) -> str | None:
    if sample.finish_reason == "abort":
        return "the backend aborted the request"
    if not sample.ids:
        return "no ids were sampled"
    ids = sample.ids
    if (not all(isinstance(t, int) and not isinstance(t, bool) for t in ids)
            or min(ids) < 0 or max(ids) >= vocab_size):
        return f"an id outside the tokenizer's vocabulary of {vocab_size}"
    if sample.logprobs is not None and len(sample.logprobs) != len(sample.ids):
        return f"{len(sample.logprobs)} logprobs for {len(sample.ids)} ids"
    return None
