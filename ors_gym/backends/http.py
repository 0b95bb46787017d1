"""``HttpBackend``: the ORS protocol over HTTP and SSE (httpx + httpx-sse).

One pooled ``httpx.Client`` per backend, made on first use so an unused backend
pickles into worker processes. Retries follow the reference client: 429, 502,
503 and 504 and connection failures back off exponentially, honouring
``Retry-After``; a 503 "starting" is ridden out; a 500 is never retried. A tool
call whose stream drops after the server acknowledged it (the ``task_id``
event) is resumed with that id, so the tool runs once. A daemon thread pings
open sessions so they outlive a slow policy. What to send and how to read the
answers lives in the sans-IO ``_http_core``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
from httpx_sse import connect_sse

from ors_gym.backends import _http_core as core
from ors_gym.backends._http_core import Where
from ors_gym.errors import (
    OrsConnectionError,
    OrsError,
    OrsProtocolError,
    OrsRequestError,
    OrsSessionExpired,
    OrsTimeoutError,
    OrsToolError,
    redact_url,
)
from ors_gym.protocol import (
    Block,
    CallResult,
    GroupScore,
    ListToolsOutput,
    Message,
    Split,
    parse,
)

__all__ = ["HttpBackend"]

logger = logging.getLogger("ors_gym.http")

#: The SDK server sends ``: ping`` every 10 s while a tool runs; this much silence
#: on a tool-call stream means the connection is dead, so the call is resumed.
_HEARTBEAT_S = 45.0
#: Timeout of the best-effort requests ``close()`` and the keepalive thread make.
_BACKGROUND_TIMEOUT_S = 5.0
_MISSING = object()
#: Transport failures that prove the request never left this machine.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


class HttpBackend:
    """Talks to an ORS server (``ors-gym serve``, an SDK ``Server``, a hosted gateway).

    ``timeout`` bounds each ordinary request and ``connect_timeout`` each
    connection attempt. ``call_timeout`` bounds one tool call end to end; None
    waits as long as the server keeps the stream alive with its pings.
    ``max_retries`` and ``backoff`` (seconds, doubled per retry) govern retries;
    ``starting_ride_out`` is how long an environment whose ``setup()`` is still
    running is waited for. ``keepalive_interval`` is how often open sessions are
    pinged (None disables it). ``api_key`` is sent as ``X-API-Key`` and never
    shown in logs, reprs or errors.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        call_timeout: float | None = None,
        max_retries: int = 5,
        backoff: float = 0.5,
        starting_ride_out: float = 600.0,
        keepalive_interval: float | None = 30.0,
        max_response_bytes: int = 64 * 1024 * 1024,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must be an http(s) URL such as 'http://127.0.0.1:8080', "
                f"got {redact_url(str(base_url))!r}"
            )
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        if call_timeout is not None and call_timeout <= 0:
            raise ValueError(f"call_timeout must be positive or None, got {call_timeout}")
        if keepalive_interval is not None and keepalive_interval <= 0:
            raise ValueError(
                f"keepalive_interval must be positive or None (off), got {keepalive_interval}"
            )
        if max_response_bytes <= 0:
            raise ValueError(f"max_response_bytes must be positive, got {max_response_bytes}")
        if max_retries < 0 or backoff < 0:
            raise ValueError("max_retries and backoff must not be negative")
        # User-info in the URL becomes basic auth, so no URL that is logged carries it.
        parts = urlsplit(base_url)
        self._auth = (
            (unquote(parts.username or ""), unquote(parts.password or ""))
            if parts.username or parts.password
            else None
        )
        self.base_url = (redact_url(base_url) or base_url).rstrip("/")
        self.location: str = self.base_url
        self._api_key = api_key
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.starting_ride_out = starting_ride_out
        self.keepalive_interval = keepalive_interval
        self.max_response_bytes = max_response_bytes
        self.headers = dict(headers or {})
        self._env_names: list[str] | None = None
        self._messages_missing = False
        self._init_runtime()

    def _init_runtime(self) -> None:
        # Everything that must not cross a pickle: a fresh process makes its own.
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._open: set[str] = set()
        self._keepalive: threading.Thread | None = None
        self._stop = threading.Event()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_client", "_lock", "_open", "_keepalive", "_stop"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        return f"HttpBackend({self.location!r})"

    def __enter__(self) -> HttpBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def open_sessions(self) -> frozenset[str]:
        """Ids of the sessions this backend opened and has not deleted (kept alive)."""
        with self._lock:
            return frozenset(self._open)

    # -- transport ----------------------------------------------------------------

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(
                    base_url=self.base_url,
                    auth=self._auth,
                    headers=self.headers,
                    timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                    follow_redirects=True,
                )
            return self._client

    def _where(
        self, env_name: str | None = None, session_id: str | None = None, tool: str | None = None
    ) -> Where:
        return Where(self.location, env_name, session_id, tool)

    def _budget(self, max_retries: int | None = None) -> core.RetryBudget:
        return core.RetryBudget(
            max_retries=self.max_retries if max_retries is None else max_retries,
            backoff=self.backoff,
            starting_ride_out=self.starting_ride_out,
            started=time.monotonic(),
        )

    def _read_capped(self, response: httpx.Response, what: str, where: Where) -> bytes:
        body = bytearray()
        for piece in response.iter_bytes():
            body += piece
            if len(body) > self.max_response_bytes:
                raise OrsProtocolError(
                    f"{what}: the answer exceeds max_response_bytes={self.max_response_bytes}",
                    **where.kw(),
                )
        return bytes(body)

    def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        where: Where,
        body: Any = None,
        session: bool = False,
        secrets: Mapping[str, str] | None = None,
        fallback: frozenset[int] = frozenset(),
        max_retries: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One JSON request with retries; returns the decoded answer.

        Answers with a status in ``fallback`` return ``_MISSING`` instead of raising.
        Every request used here is idempotent (``/create`` carries a client-made
        session id), so a dropped connection is retried like a refused one.
        """
        http = self._http()
        headers = core.build_headers(
            api_key=self._api_key, session_id=where.session_id, secrets=secrets
        )
        content = None if body is None else core.encode_json(body, what=what)
        budget = self._budget(max_retries)
        request_timeout = httpx.USE_CLIENT_DEFAULT if timeout is None else timeout
        while True:
            hint: core.RetryHint | None = None
            started = time.monotonic()
            try:
                with http.stream(
                    method, path, content=content, headers=headers, timeout=request_timeout
                ) as response:
                    data = self._read_capped(response, what, where)
            except httpx.TimeoutException as exc:
                if not isinstance(exc, httpx.ConnectTimeout):
                    raise self._timeout_error(what, where, exc) from None
                failure: OrsError = self._transport_error(what, where, exc)
            except httpx.TransportError as exc:
                failure = self._transport_error(what, where, exc)
            else:
                status = response.status_code
                _log(method, path, status, started)
                if 200 <= status < 300:
                    return core.decode_json(
                        data, response.headers.get("content-type", ""), what=what, where=where
                    )
                if status in fallback:
                    return _MISSING
                detail = core.error_detail(data)
                failure = core.status_error(
                    status, detail, what=what, where=where, session=session
                )
                hint = core.retry_hint(status, response.headers)
                if hint is None:
                    raise failure
            delay = budget.next_delay(hint, time.monotonic())
            if delay is None:
                raise failure
            logger.debug("%s %s: retry %d in %.2f s (%s)", method, path, budget.attempts,
                         delay, failure.message)
            time.sleep(delay)

    def _transport_error(self, what: str, where: Where, exc: Exception) -> OrsConnectionError:
        if isinstance(exc, httpx.ConnectTimeout):
            return OrsTimeoutError(
                f"cannot reach the ORS server at {self.location}: no connection within "
                f"connect_timeout={self.connect_timeout} s; is it running? raise "
                "HttpBackend(connect_timeout=...) for a slow network",
                **where.kw(),
            )
        if isinstance(exc, httpx.ConnectError):
            return OrsConnectionError(
                f"cannot reach the ORS server at {self.location}: {exc}; is it running? "
                "start one with `ors-gym serve`",
                **where.kw(),
            )
        return OrsConnectionError(
            f"{what}: the connection to {self.location} failed ({type(exc).__name__}: {exc})",
            **where.kw(),
        )

    def _timeout_error(self, what: str, where: Where, exc: Exception) -> OrsTimeoutError:
        return OrsTimeoutError(
            f"{what}: no answer from {self.location} within timeout={self.timeout} s "
            f"({type(exc).__name__}); raise HttpBackend(timeout=...) if the server is slow",
            **where.kw(),
        )

    def _stream(self, path: str, body: dict[str, Any], *, what: str, where: Where) -> Any:
        """POST a ``/call``-style request and reassemble its SSE answer, resuming drops.

        Once the server acknowledged the call (``task_id`` event), a dropped stream
        is re-POSTed with that id and the server replays or awaits the one run.
        Before that, the request is resent only if it surely never arrived
        (connection refused, 429, 503): otherwise the tool may have run.
        """
        http = self._http()
        headers = core.build_headers(api_key=self._api_key, session_id=where.session_id)
        budget = self._budget()
        deadline = None if self.call_timeout is None else time.monotonic() + self.call_timeout
        task_id: str | None = None
        while True:
            hint: core.RetryHint | None = None
            safe = False  # the failure proves the call did not run
            read_timeout = _HEARTBEAT_S
            if deadline is not None:
                read_timeout = min(read_timeout, max(deadline - time.monotonic(), 0.001))
            sent_task_id = task_id
            content = core.encode_json({**body, "task_id": sent_task_id}, what=what)
            timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout, read=read_timeout)
            assembler = core.StreamAssembler(
                max_bytes=self.max_response_bytes, what=what, where=where
            )
            started = time.monotonic()
            try:
                with connect_sse(
                    http, "POST", path, content=content, headers=dict(headers), timeout=timeout
                ) as source:
                    response = source.response
                    status = response.status_code
                    _log("POST", path, status, started)
                    if status != 200:
                        data = self._read_capped(response, what, where)
                        failure: OrsError = core.status_error(
                            status, core.error_detail(data), what=what, where=where, session=True
                        )
                        hint = core.retry_hint(status, response.headers)
                        if hint is None:
                            raise failure
                        safe = status in core.SAFE_BEFORE_ACK
                    else:
                        _require_sse(response, what, where)
                        events = source.iter_sse()
                        for event in events:
                            if assembler.feed(event.event, event.data):
                                _drain(events)
                                return self._finish_stream(assembler, sent_task_id, what, where)
                            task_id = assembler.task_id or task_id
                            _check_deadline(deadline, self.call_timeout, what, where)
                        failure = OrsConnectionError(
                            f"{what}: the stream ended before its result", **where.kw()
                        )
            except httpx.TimeoutException as exc:
                _check_deadline(deadline, self.call_timeout, what, where)
                if isinstance(exc, httpx.ReadTimeout):
                    failure = OrsConnectionError(
                        f"{what}: the stream went silent for {read_timeout:.0f} s although "
                        "the server pings every 10 s",
                        **where.kw(),
                    )
                else:
                    failure = self._transport_error(what, where, exc)
                safe = isinstance(exc, _NOT_SENT)
            except httpx.TransportError as exc:
                failure = self._transport_error(what, where, exc)
                safe = isinstance(exc, _NOT_SENT)
            if task_id is None and not safe:
                if hint is not None:
                    raise failure  # a 502/504 before the acknowledgement: it may have run
                raise OrsConnectionError(
                    f"{failure.message}; the server had not acknowledged the call, so "
                    "ors_gym cannot know whether the tool ran and does not resend it "
                    "(it could run twice); the episode's state is uncertain, call reset()",
                    **where.kw(),
                )
            delay = budget.next_delay(hint, time.monotonic())
            if delay is None:
                raise failure
            if deadline is not None:
                delay = min(delay, max(deadline - time.monotonic(), 0.0))
            logger.debug("POST %s: %s; %s in %.2f s", path, failure.message,
                         "resuming" if task_id else "retrying", delay)
            time.sleep(delay)

    def _finish_stream(
        self, assembler: core.StreamAssembler, sent_task_id: str | None, what: str, where: Where
    ) -> Any:
        if assembler.error is None:
            return assembler.result()
        if sent_task_id is not None and assembler.error.strip() == "unknown task_id":
            raise OrsConnectionError(
                f"{what}: the stream dropped and the server no longer knows call "
                f"{sent_task_id} (it restarted, or the result expired 60 s after the tool "
                "finished); the tool may have run, call reset()",
                **where.kw(),
            )
        raise OrsToolError(
            f"{what} raised on the server: {assembler.error}. The tool raised on the "
            "server; this is a bug in the environment, not the agent",
            **where.kw(),
        )

    # -- discovery ------------------------------------------------------------------

    def _get(self, path: str, what: str, where: Where) -> Any:
        return self._request("GET", path, what=what, where=where)

    def health(self) -> dict[str, Any]:
        """``/health``: ``{"status": "ok"}`` when the server is up."""
        answer = self._get("/health", "GET /health", self._where())
        return dict(parse(dict[str, Any], answer, what="/health answer", where=self.location))

    def version(self) -> dict[str, Any]:
        """``/version``: the server SDK's ``version`` and ``build_sha``."""
        answer = self._get("/version", "GET /version", self._where())
        return dict(parse(dict[str, Any], answer, what="/version answer", where=self.location))

    def list_environments(self) -> list[str]:
        """Environment names, lower-cased; the first is the default. Cached."""
        names = self._env_names
        if names is None:
            answer = self._get("/list_environments", "GET /list_environments", self._where())
            names = parse(list[str], answer, what="/list_environments answer",
                          where=self.location)
            names = self._env_names = [name.lower() for name in names]
        return list(names)

    def _env(self, env_name: str) -> str:
        """The path segment for ``env_name``; raises OrsRequestError if the server lacks it.

        The server redirects unknown names to its default environment, which would
        end in a generic 404, so names are checked against ``/list_environments``.
        """
        if not isinstance(env_name, str) or not env_name:
            raise OrsRequestError(
                f"environment name must be a non-empty str, got {env_name!r}",
                server=self.location,
            )
        key = env_name.lower()
        if key in self.list_environments():
            return key
        self._env_names = None  # the server may have restarted with other environments
        names = self.list_environments()
        if key in names:
            return key
        err = OrsRequestError(
            f"unknown environment {env_name!r}; this server has: {', '.join(names) or '(none)'}",
            server=self.location,
            env_name=env_name,
        )
        err.status_code = 404
        raise err

    def tools(self, env_name: str) -> ListToolsOutput:
        """The environment's shared tools and its terminal tool."""
        env = self._env(env_name)
        answer = self._get(f"/{env}/tools", f"GET /{env}/tools", self._where(env))
        return parse(ListToolsOutput, answer, what=f"/{env}/tools answer", where=self.location)

    def splits(self, env_name: str) -> list[Split]:
        """The task splits, in the server's order."""
        env = self._env(env_name)
        answer = self._get(f"/{env}/splits", f"GET /{env}/splits", self._where(env))
        return parse(list[Split], answer, what=f"/{env}/splits answer", where=self.location)

    def _post_field(self, env: str, endpoint: str, body: dict[str, Any], key: str) -> Any:
        what = f"POST /{env}/{endpoint}"
        answer = self._request("POST", f"/{env}/{endpoint}", what=what, where=self._where(env),
                               body=body)
        if not isinstance(answer, dict) or key not in answer:
            raise OrsProtocolError(
                f"malformed {what} answer: no {key!r} field", server=self.location, env_name=env
            )
        return answer[key]

    def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        """Every task of ``split``; raises OrsRequestError for index-only environments."""
        env = self._env(env_name)
        tasks = self._post_field(env, "tasks", {"split": split}, "tasks")
        return parse(list[dict[str, Any]], tasks, what=f"/{env}/tasks answer",
                     where=self.location)

    def num_tasks(self, env_name: str, split: str) -> int:
        """How many tasks ``split`` has."""
        env = self._env(env_name)
        count = self._post_field(env, "num_tasks", {"split": split}, "num_tasks")
        return int(parse(int, count, what=f"/{env}/num_tasks answer", where=self.location))

    def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split`` (negative counts from the end)."""
        env = self._env(env_name)
        task = self._post_field(env, "task", {"split": split, "index": index}, "task")
        return dict(parse(dict[str, Any], task, what=f"/{env}/task answer", where=self.location))

    def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        """Tasks ``start:stop`` of ``split``, with Python slice rules."""
        env = self._env(env_name)
        body = {"split": split, "start": start, "stop": stop}
        tasks = self._post_field(env, "task_range", body, "tasks")
        return parse(list[dict[str, Any]], tasks, what=f"/{env}/task_range answer",
                     where=self.location)

    # -- sessions -------------------------------------------------------------------

    def create_session(
        self,
        env_name: str,
        *,
        task_spec: Mapping[str, Any] | None = None,
        split: str | None = None,
        index: int | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> str:
        """Open a session (one episode) for a task; returns its id.

        Give either ``task_spec`` or ``split`` and ``index``. The session id is a
        uuid4 made here (the protocol allows any unique id), which saves the
        ``/create_session`` round trip. ``secrets`` travel only in ``X-Secrets``.
        """
        if (task_spec is None) == (split is None and index is None):
            raise ValueError(
                "create_session needs either task_spec=... or split=... and index=..., "
                "not both and not neither"
            )
        if task_spec is None and (split is None or index is None):
            raise ValueError("create_session needs both split=... and index=... together")
        env = self._env(env_name)
        sid = str(uuid.uuid4())
        body: dict[str, Any] = {"env_name": env}
        if task_spec is not None:
            body["task_spec"] = dict(task_spec)
        else:
            body.update(split=split, index=index)
        where = self._where(env, sid)
        try:
            self._request("POST", "/create", what=f"create a {env} session", where=where,
                          body=body, secrets=secrets)
        except OrsRequestError as exc:
            # Only a resent /create whose first attempt got through meets our own uuid4.
            if exc.status_code != 400 or "already exists" not in exc.message:
                raise
        with self._lock:
            self._open.add(sid)
        self._start_keepalive()
        return sid

    def prompt(self, env_name: str, session_id: str) -> list[Block]:
        """The first observation, as blocks. Ask once per episode."""
        env = self._env(env_name)
        answer = self._request("GET", f"/{env}/prompt", what=f"GET /{env}/prompt",
                               where=self._where(env, session_id), session=True)
        return parse(list[Block], answer, what=f"/{env}/prompt answer", where=self.location)

    def messages(self, env_name: str, session_id: str) -> list[Message]:
        """The prompt as a role-tagged conversation (``/prompt`` wrapped on old servers)."""
        env = self._env(env_name)
        if not self._messages_missing:
            answer = self._request(
                "GET", f"/{env}/messages", what=f"GET /{env}/messages",
                where=self._where(env, session_id), session=True,
                fallback=frozenset({404, 405}),
            )
            if answer is not _MISSING:
                return parse(list[Message], answer, what=f"/{env}/messages answer",
                             where=self.location)
        blocks = self.prompt(env, session_id)  # raises OrsSessionExpired if that was the 404
        if not self._messages_missing:
            logger.debug("%s has no /messages; using /prompt from now on", self.location)
            self._messages_missing = True
        return [Message(role="user", blocks=list(blocks))]

    def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        """Shared tools plus this task's own tools."""
        env = self._env(env_name)
        answer = self._request("GET", f"/{env}/task_tools", what=f"GET /{env}/task_tools",
                               where=self._where(env, session_id), session=True)
        return parse(ListToolsOutput, answer, what=f"/{env}/task_tools answer",
                     where=self.location)

    def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> CallResult:
        """Run one tool call; agent mistakes come back as ``RunToolError``.

        Raises OrsToolError when the tool's own code raised on the server.
        """
        env = self._env(env_name)
        where = self._where(env, session_id, name)
        answer = self._stream(
            f"/{env}/call",
            {"name": name, "input": dict(arguments)},
            what=f"tool call {name!r}",
            where=where,
        )
        return parse(CallResult, answer, what=f"/{env}/call result", where=self.location)

    def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> list[GroupScore]:
        """Score candidate transcripts (``{"messages": [...], "metadata": ...}``), index-aligned.

        Messages may be dicts or ``ors_gym.protocol.Message`` objects. Raises
        OrsRequestError if the environment does not implement group scoring.
        """
        env = self._env(env_name)
        answer = self._stream(
            f"/{env}/score_group",
            {"candidates": [dict(c) for c in candidates]},
            what="score_group",
            where=self._where(env, session_id),
        )
        if not isinstance(answer, dict) or "scores" not in answer:
            raise OrsProtocolError("malformed /score_group result: no 'scores' field",
                                   server=self.location, env_name=env, session_id=session_id)
        return parse(list[GroupScore], answer["scores"], what="/score_group result",
                     where=self.location)

    def delete_session(self, session_id: str) -> None:
        """End the session; idempotent, never raises for an already-gone session."""
        with self._lock:
            self._open.discard(session_id)
        self._delete(session_id, max_retries=None, timeout=None)

    def _delete(self, session_id: str, *, max_retries: int | None, timeout: float | None) -> None:
        try:
            self._request("POST", "/delete", what="delete the session",
                          where=self._where(session_id=session_id), session=True,
                          max_retries=max_retries, timeout=timeout)
        except (OrsSessionExpired, OrsConnectionError) as exc:
            logger.debug("delete of session %s skipped: %s", session_id, exc.message)

    def ping(self, session_id: str) -> None:
        """Keep the session alive; raises OrsSessionExpired once it is gone."""
        self._request("POST", "/ping", what="ping the session",
                      where=self._where(session_id=session_id), session=True)

    def close(self) -> None:
        """Delete open sessions (best effort), stop the keepalive thread, close connections.

        Safe to call twice; the backend stays usable and reconnects on next use.
        """
        self._stop.set()
        thread = self._keepalive
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=_BACKGROUND_TIMEOUT_S)
        with self._lock:
            sids, self._open = list(self._open), set()
            self._keepalive = None
        if sids and self._client is not None:
            for sid in sids:
                try:
                    self._delete(sid, max_retries=0, timeout=_BACKGROUND_TIMEOUT_S)
                except OrsError as exc:
                    logger.debug("delete of session %s at close failed: %s", sid, exc.message)
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- keepalive ------------------------------------------------------------------

    def _start_keepalive(self) -> None:
        if self.keepalive_interval is None:
            return
        with self._lock:
            if self._keepalive is not None and self._keepalive.is_alive():
                return
            self._stop = threading.Event()
            self._keepalive = threading.Thread(
                target=_keepalive_loop,
                args=(weakref.ref(self), self._stop, self.keepalive_interval),
                name=f"ors-keepalive {self.location}",
                daemon=True,
            )
            self._keepalive.start()

    def _ping_open_sessions(self, stop: threading.Event) -> None:
        for sid in self.open_sessions:
            if stop.is_set():  # close() is tearing the client down
                return
            try:
                self._request("POST", "/ping", what="keepalive ping",
                              where=self._where(session_id=sid), session=True,
                              max_retries=0, timeout=_BACKGROUND_TIMEOUT_S)
            except OrsSessionExpired:
                logger.debug("session %s is gone; no longer keeping it alive", sid)
                with self._lock:
                    self._open.discard(sid)
            except Exception as exc:  # a missed ping is retried next tick; never kill the thread
                logger.debug("keepalive ping of session %s failed: %s", sid, exc)


def _keepalive_loop(ref: weakref.ref[HttpBackend], stop: threading.Event, interval: float) -> None:
    # Holds the backend only weakly, so dropping it without close() lets it be collected.
    while not stop.wait(interval):
        backend = ref()
        if backend is None:
            return
        backend._ping_open_sessions(stop)
        del backend


def _log(method: str, path: str, status: int, started: float) -> None:
    logger.debug("%s %s -> %d in %.1f ms", method, path, status,
                 (time.monotonic() - started) * 1000)


def _drain(events: Iterator[Any]) -> None:
    """Read a finished stream to its end, so its connection goes back to the pool."""
    try:
        for _ in events:
            pass
    except httpx.HTTPError:
        pass


def _require_sse(response: httpx.Response, what: str, where: Where) -> None:
    mime = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if mime != "text/event-stream":
        raise OrsProtocolError(
            f"{what}: expected an SSE stream (text/event-stream), got {mime or 'none'!r}; "
            "check the URL points at an ORS server",
            **where.kw(),
        )


def _check_deadline(deadline: float | None, call_timeout: float | None, what: str,
                    where: Where) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise OrsTimeoutError(
            f"{what} did not finish within call_timeout={call_timeout} s; the tool may "
            "still be running on the server. Raise HttpBackend(call_timeout=...) or pass "
            "None to wait as long as the server keeps the stream alive",
            **where.kw(),
        )

