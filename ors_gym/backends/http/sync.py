"""``HttpBackend``: the ORS protocol over HTTP and SSE, with blocking httpx.

One pooled ``httpx.Client`` per backend, made on first use so an unused backend
pickles into worker processes. Every method runs a sans-IO operation of
``_ops.Ops`` (what to send, when to retry or resume, how to read the answer)
and performs its steps with blocking I/O: the retries, resumes and errors are
those of ``AsyncHttpBackend``, which performs the same steps on asyncio. A
daemon thread pings open sessions so they outlive a slow policy.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import httpx

from ors_gym.backends.http._codec import require_sse
from ors_gym.backends.http._httpx import (
    BACKGROUND_TIMEOUT_S,
    SSE_HEADERS,
    drain,
    failure_of,
    fetch_timeout,
    stream_timeout,
)
from ors_gym.backends.http._ops import Ops
from ors_gym.backends.http._settings import SETUP_TIMEOUT_S, configure, url_of
from ors_gym.backends.http._steps import Answer, Failure, Fetch, Op, Reply, Stream, Streamed
from ors_gym.errors import OrsError, OrsSessionExpired
from ors_gym.protocol import (
    Block,
    CallResult,
    GroupScore,
    ListToolsOutput,
    Message,
    Split,
)

__all__ = ["HttpBackend"]

logger = logging.getLogger("ors_gym.http")

_T = TypeVar("_T")


class HttpBackend:
    """Talks to an ORS server (``ors-gym serve``, an SDK ``Server``, a hosted gateway).

    ``timeout`` bounds each ordinary request and ``connect_timeout`` each
    connection attempt. ``call_timeout`` bounds one tool call end to end; None
    waits as long as the server keeps the stream alive with its pings.
    ``max_retries`` and ``backoff`` (seconds, doubled per retry) govern retries
    of 429, 502, 503 and 504 answers and dropped connections (a refused one
    fails at once: nothing listens); ``starting_ride_out`` is how long an
    environment whose ``setup()`` is still running is waited for.
    ``keepalive_interval`` is how often open sessions are pinged (None disables
    it), also while a slow ``/create``, ``/prompt`` or ``/messages`` runs: those
    wait up to ``setup_timeout`` for the environment's constructor, ``setup()``
    and prompt, as the SDK client waits. ``api_key`` is sent as ``X-API-Key``
    and never shown in logs, reprs or errors.

    A hosted environment: ``deployment="Namespace/name"`` (sent as
    ``X-Deployment``; sessions come from ``/create_session``), optionally
    ``variant`` (one environment class inside it; without it the server's
    first). ``base_url`` and ``api_key`` then default as in the SDK: the session
    host ``OPENREWARD_SESSION_URL``, else ``sessions.`` + ``OPENREWARD_URL``
    (default ``https://openreward.ai``), and ``OPENREWARD_API_KEY``. A missing
    or refused key raises ``OrsAuthError``.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        deployment: str | None = None,
        variant: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        call_timeout: float | None = None,
        max_retries: int = 5,
        backoff: float = 0.5,
        starting_ride_out: float = 600.0,
        setup_timeout: float = SETUP_TIMEOUT_S,
        keepalive_interval: float | None = 30.0,
        max_response_bytes: int = 64 * 1024 * 1024,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = configure(
            "HttpBackend", base_url, keepalive_interval=keepalive_interval, headers=headers,
            api_key=api_key, timeout=timeout, connect_timeout=connect_timeout,
            call_timeout=call_timeout, max_retries=max_retries, backoff=backoff,
            starting_ride_out=starting_ride_out, max_response_bytes=max_response_bytes,
            setup_timeout=setup_timeout, deployment=deployment, variant=variant,
        )
        self.base_url = self.location = self.settings.location
        self.headers = dict(headers or {})
        self.keepalive_interval = keepalive_interval
        self._ops = Ops(self.settings, time.monotonic)
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
        s = self.settings
        if s.hosted:
            variant = "" if s.variant is None else f", variant={s.variant!r}"
            return f"HttpBackend({self.location!r}, deployment={s.deployment!r}{variant})"
        return f"HttpBackend({self.location!r})"

    def __enter__(self) -> HttpBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Settings as attributes, for callers and tests that read them.
    @property
    def timeout(self) -> float:
        return self.settings.timeout

    @property
    def connect_timeout(self) -> float:
        return self.settings.connect_timeout

    @property
    def call_timeout(self) -> float | None:
        return self.settings.call_timeout

    @property
    def max_retries(self) -> int:
        return self.settings.max_retries

    @property
    def backoff(self) -> float:
        return self.settings.backoff

    @property
    def starting_ride_out(self) -> float:
        return self.settings.starting_ride_out

    @property
    def max_response_bytes(self) -> int:
        return self.settings.max_response_bytes

    @property
    def open_sessions(self) -> frozenset[str]:
        """Ids of the sessions this backend opened and has not deleted (kept alive)."""
        with self._lock:
            return frozenset(self._open)

    # -- transport: perform the core's steps --------------------------------------------

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                # Redirects, auth, headers and decoding are the operations' (see _exchange).
                self._client = httpx.Client(
                    timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                    follow_redirects=False,
                )
            return self._client

    def _run(self, op: Op[_T]) -> _T:
        """Drive one operation to its result, performing each step it yields."""
        reply: Reply = None
        try:
            while True:
                step = op.send(reply)
                if isinstance(step, Stream):
                    reply = self._stream(step)
                elif isinstance(step, Fetch):
                    reply = self._fetch(step)
                else:
                    time.sleep(step.seconds)
                    reply = None
        except StopIteration as done:
            return done.value
        finally:
            op.close()

    def _fetch(self, step: Fetch) -> Answer | Failure:
        started = time.monotonic()
        try:
            with self._http().stream(step.method, url_of(self.location, step.path),
                                     content=step.content, headers=step.headers,
                                     timeout=fetch_timeout(step, self.settings)) as response:
                return _read(response, step, started)
        except httpx.TransportError as exc:
            return failure_of(exc)

    def _stream(self, step: Stream) -> Answer | Streamed | Failure:
        started = time.monotonic()
        try:
            with self._http().stream("POST", url_of(self.location, step.path),
                                     content=step.content,
                                     headers={**step.headers, **SSE_HEADERS},
                                     timeout=stream_timeout(step, self.settings)) as response:
                if response.status_code != 200:
                    return _read(response, step, started)
                require_sse(response.headers.get("content-type", ""), step.what, step.where)
                step.sink.start(response.headers.get("content-encoding", ""))
                pieces = response.iter_raw()
                for raw in pieces:
                    if step.sink.feed_bytes(raw):
                        drain(pieces)
                        break
        except httpx.TransportError as exc:
            return failure_of(exc)
        return Streamed(time.monotonic() - started)

    # -- discovery ------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``/health``: ``{"status": "ok"}`` when the server is up."""
        return self._run(self._ops.health())

    def version(self) -> dict[str, Any]:
        """``/version``: the server SDK's ``version`` and ``build_sha``."""
        return self._run(self._ops.version())

    def list_environments(self) -> list[str]:
        """Environment names, lower-cased; the first is the default. Cached."""
        return self._run(self._ops.list_environments())

    def tools(self, env_name: str) -> ListToolsOutput:
        """The environment's shared tools and its terminal tool."""
        return self._run(self._ops.tools(env_name))

    def splits(self, env_name: str) -> list[Split]:
        """The task splits, in the server's order."""
        return self._run(self._ops.splits(env_name))

    def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        """Every task of ``split``; raises OrsRequestError for index-only environments."""
        return self._run(self._ops.tasks(env_name, split))

    def num_tasks(self, env_name: str, split: str) -> int:
        """How many tasks ``split`` has."""
        return self._run(self._ops.num_tasks(env_name, split))

    def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split`` (negative counts from the end)."""
        return self._run(self._ops.task(env_name, split, index))

    def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        """Tasks ``start:stop`` of ``split``, with Python slice rules."""
        return self._run(self._ops.task_range(env_name, split, start, stop))

    # -- sessions -------------------------------------------------------------------

    def create_session(
        self,
        env_name: str,
        *,
        task_spec: Mapping[str, Any] | None = None,
        split: str | None = None,
        index: int | None = None,
        secrets: Mapping[str, str] | None = None,
        toolset: str | None = None,
    ) -> str:
        """Open a session (one episode) for a task; returns its id.

        Give either ``task_spec`` or ``split`` and ``index``. The session id is
        issued by ``/create_session`` for a hosted deployment, else a uuid4 made
        here (the protocol allows any unique id), which saves a round trip.
        ``secrets`` travel only in ``X-Secrets``. ``toolset`` names a session
        toolset (``openreward.toolsets.BUILTIN_TOOLSETS``): its tools join the
        session's, its terminal tool replaces the environment's; an unknown one
        raises OrsRequestError naming the known ones.
        """
        sid = self._run(self._ops.create_session(
            env_name, task_spec=task_spec, split=split, index=index, secrets=secrets,
            toolset=toolset,
        ))
        with self._lock:
            self._open.add(sid)
        self._start_keepalive()
        return sid

    def prompt(self, env_name: str, session_id: str) -> list[Block]:
        """The first observation, as blocks. Ask once per episode."""
        return self._run(self._ops.prompt(env_name, session_id))

    def messages(self, env_name: str, session_id: str) -> list[Message]:
        """The prompt as a role-tagged conversation (``/prompt`` wrapped on old servers)."""
        return self._run(self._ops.messages(env_name, session_id))

    def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        """Shared tools plus this task's own tools."""
        return self._run(self._ops.task_tools(env_name, session_id))

    def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> CallResult:
        """Run one tool call; agent mistakes come back as ``RunToolError``.

        Raises OrsToolError when the tool's own code raised on the server.
        """
        return self._run(self._ops.call(env_name, session_id, name, arguments))

    def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> list[GroupScore]:
        """Score candidate transcripts (``{"messages": [...], "metadata": ...}``), index-aligned.

        Messages may be dicts or ``ors_gym.protocol.Message`` objects. Raises
        OrsRequestError if the environment does not implement group scoring.
        """
        return self._run(self._ops.score_group(env_name, session_id, candidates))

    def delete_session(self, session_id: str) -> None:
        """End the session; idempotent, never raises for an already-gone session."""
        with self._lock:
            self._open.discard(session_id)
        self._run(self._ops.delete(session_id))

    def ping(self, session_id: str) -> None:
        """Keep the session alive; raises OrsSessionExpired once it is gone."""
        self._run(self._ops.ping(session_id))

    def close(self) -> None:
        """Delete open sessions (best effort), stop the keepalive thread, close connections.

        Safe to call twice; the backend stays usable and reconnects on next use.
        """
        self._stop.set()
        thread = self._keepalive
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=BACKGROUND_TIMEOUT_S)
        with self._lock:
            sids, self._open = list(self._open), set()
            self._keepalive = None
        if sids and self._client is not None:
            for sid in sids:
                try:
                    self._run(self._ops.delete(sid, max_retries=0,
                                               timeout=BACKGROUND_TIMEOUT_S))
                except OrsError as exc:
                    logger.debug("delete of session %s at close failed: %s", sid, exc.message)
        if self._ops.discovery_sid is not None and self._client is not None:
            self._run(self._ops.release_discovery(timeout=BACKGROUND_TIMEOUT_S))
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
                self._run(self._ops.ping(sid, max_retries=0, timeout=BACKGROUND_TIMEOUT_S))
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


def _read(response: httpx.Response, step: Fetch | Stream, started: float) -> Answer:
    """The whole answer, decoded within the size cap (and the time limit of a ``Fetch``)."""
    reader = step.reader(response.headers.get("content-encoding", ""))
    for raw in response.iter_raw():
        reader.feed(raw)
    return Answer(response.status_code, response.headers, reader.value(),
                  time.monotonic() - started)
