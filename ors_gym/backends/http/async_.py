"""``AsyncHttpBackend``: the ORS protocol over HTTP and SSE on asyncio.

It drives the sans-IO operations (``_ops.Ops``): each yields steps (send
this request, read this stream, wait this long) and this module performs
them. Every request goes through one interface, an httpx transport's
``handle_async_request``: the transport given (shared with other backends,
e.g. one ``pooled_transport()`` under every sub-env of ``OrsVectorEnv``), or the
backend's own pool, made on first use inside the running loop (and again if
the backend is later used from another loop). Open sessions are pinged by a
task on that loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import httpx

from ors_gym.backends._face import AsyncFace
from ors_gym.backends.base import SessionArgs
from ors_gym.backends.http._codec import header_map, require_sse
from ors_gym.backends.http._ops import Ops
from ors_gym.backends.http._settings import configure, url_of
from ors_gym.backends.http._steps import (
    Answer,
    Failure,
    Fetch,
    Op,
    Reply,
    Stream,
    Streamed,
    fetch_timeouts,
    stream_timeouts,
)
from ors_gym.backends.http.options import HttpOptions
from ors_gym.backends.http.transport._pool import failure_of, pooled_transport
from ors_gym.errors import OrsError, OrsSessionExpired
from ors_gym.protocol import Block, CallResult, GroupScore, ListToolsOutput, Message, Split

__all__ = ["AsyncHttpBackend"]

logger = logging.getLogger("ors_gym.http")

_T = TypeVar("_T")
#: Distinct URLs whose parsed form a backend keeps (a server's few endpoints).
_URL_CACHE = 256
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: Timeout of the best-effort requests ``close()`` and the keepalive make.
BACKGROUND_TIMEOUT_S = 5.0
#: The most ``close()`` spends giving back sessions and ids (each release retries, and
#: waits out a 429, as every request does: this bounds them all).
CLOSE_TIMEOUT_S = 10.0
#: What an SSE request adds to its headers (as ``httpx_sse.connect_sse`` does).
SSE_HEADERS = {"Accept": "text/event-stream", "Cache-Control": "no-store"}


class AsyncHttpBackend(AsyncFace):
    """Talks to an ORS server from asyncio code; every method is a coroutine.

    ``base_url`` is the server (``http://user:pass@host:port`` sends basic
    auth; the URL shown anywhere has no user-info). A hosted environment:
    ``deployment="Namespace/name"`` (sent as ``X-Deployment``; sessions come
    from ``/create_session``), optionally ``variant`` (one environment class
    inside it); ``base_url`` and ``api_key`` then default as in the SDK (the
    session host ``OPENREWARD_SESSION_URL``, else ``sessions.`` +
    ``OPENREWARD_URL``, and ``OPENREWARD_API_KEY``). ``api_key`` is sent as
    ``X-API-Key`` and never shown in logs, reprs or errors.

    The ``HttpOptions`` (timeouts, retries, keepalive, size cap, headers,
    connection limits, transport) come as ``options=`` or by name
    (``AsyncHttpBackend(url, call_timeout=60)``), read back as ``options``.
    ``transport`` is any ``httpx.AsyncBaseTransport`` to send through, shared
    (the backend does not close it); without one the backend keeps its own
    ``pooled_transport`` (which honours the proxy variables as httpx does).
    Requests are handed to the transport directly rather
    than through an ``httpx.AsyncClient``, whose per-request layers (auth flow,
    redirects, cookies, hooks) the operations already do as ORS needs them.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        deployment: str | None = None,
        variant: str | None = None,
        api_key: str | None = None,
        options: HttpOptions | None = None,
        _set_as: str = "AsyncHttpBackend",
        _platform_api: bool = False,
        **option_values: Any,
    ) -> None:
        self.options = HttpOptions.of(options, **option_values)
        self.settings = configure(_set_as, base_url, self.options, api_key=api_key,
                                  deployment=deployment, variant=variant,
                                  platform_api=_platform_api)
        self.base_url = self.location = self.settings.location
        self._ops = Ops(self.settings, time.monotonic)
        self._shared = self.options.transport
        self.forget_sessions()

    @classmethod
    def platform_api(
        cls, base_url: str | None = None, *, api_key: str | None = None,
        set_as: str = "PlatformClient", **option_values: Any,
    ) -> AsyncHttpBackend:
        """A backend for the OpenReward platform's API host, beside the session hosts
        (required secrets, task difficulty, the rollout log), to ask with ``request``.

        ``base_url`` and ``api_key`` default as the SDK's (``OPENREWARD_API_URL``, else
        ``api.`` + ``OPENREWARD_URL``; ``OPENREWARD_API_KEY``). Its errors speak of the
        platform's API and the variables behind it, never of an environment or of
        starting a server; ``set_as`` names the class the user made, in messages.
        """
        return cls(base_url, api_key=api_key, _set_as=set_as, _platform_api=True,
                   **option_values)

    async def request(
        self, method: str, path: str, *, body: Any = None, what: str | None = None,
        idempotent: bool = True,
    ) -> Any:
        """One JSON request to a path under ``base_url``, for endpoints beside the ORS
        protocol (the platform's API): retried, redirected and reported as every ORS
        request is (``idempotent=False``: sent again only when the server cannot have
        read it). Returns the decoded JSON answer."""
        return await self._run(self._ops.exchange.request(
            method, path, what=what or f"{method} {path}", where=self._ops.where(),
            body=body, idempotent=idempotent))

    def forget_sessions(self) -> None:
        """Forget connections, open sessions and the keepalive task without closing them
        (they belong to another loop, or to the parent of a forked child)."""
        self._urls: dict[str, tuple[httpx.URL, str]] = {}
        self._own: httpx.AsyncBaseTransport | None = None  # the backend's own transport
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._open: set[str] = set()
        self._unfinished: set[str] = set()  # deletions cut short: deleted at aclose, not pinged
        self._keepalive: asyncio.Task[None] | None = None
        self._releases: set[asyncio.Future[None]] = set()  # ids given back (see _release)

    def __getstate__(self) -> dict[str, Any]:
        # A transport is this process's (its options pickle without it): a copy elsewhere
        # makes its own pool.
        state = self.__dict__.copy()
        for key in ("_own", "_own_loop", "_open", "_unfinished", "_keepalive", "_shared",
                    "_urls", "_releases"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._shared = None
        self.forget_sessions()

    def __repr__(self) -> str:
        s = self.settings
        if s.hosted:
            variant = "" if s.variant is None else f", variant={s.variant!r}"
            return f"AsyncHttpBackend({self.location!r}, deployment={s.deployment!r}{variant})"
        return f"AsyncHttpBackend({self.location!r})"

    @property
    def open_sessions(self) -> frozenset[str]:
        """Ids of the sessions this backend opened and has not deleted: kept alive, but
        for those whose deletion was cancelled, which ``aclose`` deletes."""
        return frozenset(self._open | self._unfinished)

    @property
    def offers_messages(self) -> bool:
        """False once the server answered that it has no ``/messages`` (then ``messages``
        asks ``/prompt``, and a caller holding the prompt need not ask at all)."""
        return not self._ops.messages_missing

    # -- transport: perform the core's steps --------------------------------------------

    def _transport(self) -> httpx.AsyncBaseTransport:
        if self._shared is not None:
            return self._shared
        loop = asyncio.get_running_loop()
        if self._own is None or self._own_loop is not loop:
            # A transport from another (finished) loop cannot be used or closed here.
            self._own = pooled_transport(
                self.options.max_connections, self.options.max_keepalive_connections,
                max_connections_per_host=self.options.max_connections_per_host)
            self._own_loop = loop
        return self._own

    async def _send(
        self, method: str, path: str, headers: Mapping[str, str], content: bytes | None,
        timeout: dict[str, float | None],
    ) -> httpx.Response:
        """Send one request through the transport, its answer unread (the caller closes it).

        The request is the one ``httpx.Request(method, url, headers=headers,
        content=content)`` makes (``Host`` and ``Content-Length`` added), built from
        its body stream, which skips httpx's second pass over the headers.
        """
        target = self._urls.get(path)
        if target is None:
            target = self._url(path)
        url, host = target
        sent = {"Host": host, **headers}
        if content:
            sent["Content-Length"] = str(len(content))
        elif method in _BODY_METHODS:
            sent["Content-Length"] = "0"
        request = httpx.Request(method, url, headers=sent, stream=httpx.ByteStream(content or b""),
                                extensions={"timeout": timeout})
        return await self._transport().handle_async_request(request)

    def _url(self, path: str) -> tuple[httpx.URL, str]:
        """``path``'s absolute URL, parsed once (a backend sends to a few endpoints),
        and its ``Host`` header."""
        if len(self._urls) >= _URL_CACHE:
            self._urls.clear()
        url = httpx.URL(url_of(self.location, path))
        target = self._urls[path] = (url, url.netloc.decode("ascii"))
        return target

    async def _run(self, op: Op[_T]) -> _T:
        """Drive one operation to its result, performing each step it yields."""
        reply: Reply = None
        try:
            while True:
                step = op.send(reply)
                if isinstance(step, Stream):
                    reply = await self._stream(step)
                elif isinstance(step, Fetch):
                    reply = await self._fetch(step)
                else:
                    await asyncio.sleep(step.seconds)
                    reply = None
        except StopIteration as done:
            return done.value
        finally:
            op.close()

    async def _fetch(self, step: Fetch) -> Answer | Failure:
        started = time.monotonic()
        try:
            response = await self._send(step.method, step.path, step.headers, step.content,
                                        fetch_timeouts(step, self.settings))
            if step.check is not None:
                step.check.answered()
            try:
                return await _read(response, step, started)
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            return failure_of(exc)

    async def _stream(self, step: Stream) -> Answer | Streamed | Failure:
        started = time.monotonic()
        try:
            response = await self._send("POST", step.path, {**step.headers, **SSE_HEADERS},
                                        step.content, stream_timeouts(step, self.settings))
            try:
                if response.status_code != 200:
                    return await _read(response, step, started)
                headers = header_map(response.headers.raw)
                require_sse(headers.get("content-type", ""), step.what, step.where)
                await step.sink.read(_body(response), headers.get("content-encoding", ""))
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            return failure_of(exc)
        return Streamed(time.monotonic() - started)

    # -- discovery ------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """``/health``: ``{"status": "ok"}`` when the server is up."""
        return await self._run(self._ops.health())

    async def probe(self, timeout: float = BACKGROUND_TIMEOUT_S) -> None:
        """One ``/health`` request without retries; raises OrsError if the server is not up."""
        await self._run(self._ops.exchange.request("GET", "/health", what="GET /health",
                                          where=self._ops.where(), max_retries=0,
                                          timeout=timeout))

    async def version(self) -> dict[str, Any]:
        """``/version``: the server SDK's ``version`` and ``build_sha``."""
        return await self._run(self._ops.version())

    async def list_environments(self) -> list[str]:
        """Environment names, lower-cased; the first is the default. Cached."""
        return await self._run(self._ops.list_environments())

    async def tools(self, env_name: str) -> ListToolsOutput:
        """The environment's shared tools and its terminal tool."""
        return await self._run(self._ops.tools(env_name))

    async def splits(self, env_name: str) -> list[Split]:
        """The task splits, in the server's order."""
        return await self._run(self._ops.splits(env_name))

    async def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        """Every task of ``split``; raises OrsRequestError for index-only environments."""
        return await self._run(self._ops.tasks(env_name, split))

    async def num_tasks(self, env_name: str, split: str) -> int:
        """How many tasks ``split`` has."""
        return await self._run(self._ops.num_tasks(env_name, split))

    async def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split`` (negative counts from the end)."""
        return await self._run(self._ops.task(env_name, split, index))

    async def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        """Tasks ``start:stop`` of ``split``, with Python slice rules."""
        return await self._run(self._ops.task_range(env_name, split, start, stop))

    # -- sessions -------------------------------------------------------------------

    async def create_session(self, env_name: str, **kwargs: Unpack[SessionArgs]) -> str:
        """Open a session (one episode) for a task; returns its id (see ``SessionArgs``).

        A hosted session's id, once issued, is given back when ``/create`` fails or
        the call is cancelled (see ``_release``): no id is left with the gateway.
        """
        sid = await self._run(self._ops.session_id(env_name, **kwargs))
        try:
            await self._run(self._ops.create(env_name, sid, **kwargs))
        except BaseException:
            if self.settings.hosted:
                await self._release(sid)
            raise
        self._open.add(sid)
        self._start_keepalive()
        return sid

    async def prompt(self, env_name: str, session_id: str) -> list[Block]:
        """The first observation, as blocks. Ask once per episode."""
        return await self._run(self._ops.prompt(env_name, session_id))

    async def messages(self, env_name: str, session_id: str) -> list[Message]:
        """The prompt as a role-tagged conversation (``/prompt`` wrapped on old servers)."""
        return await self._run(self._ops.messages(env_name, session_id))

    async def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        """Shared tools plus this task's own tools."""
        return await self._run(self._ops.task_tools(env_name, session_id))

    async def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> CallResult:
        """Run one tool call; agent mistakes come back as ``RunToolError``.

        Raises OrsToolError when the tool's own code raised on the server.
        """
        return await self._run(self._ops.call(env_name, session_id, name, arguments))

    async def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> list[GroupScore]:
        """Score candidate transcripts, index-aligned (see ``AsyncBackend.score_group``)."""
        return await self._run(self._ops.score_group(env_name, session_id, candidates))

    async def delete_session(self, session_id: str) -> None:
        """End the session; idempotent, never raises for an already-gone session.

        A cancelled deletion may never have reached the server: the session is then no
        longer kept alive (the server reaps it when idle) but is deleted by ``aclose``.
        """
        self._open.discard(session_id)  # no longer pinged, whatever happens below
        try:
            await self._run(self._ops.delete(session_id))
        except asyncio.CancelledError:
            self._unfinished.add(session_id)
            raise
        self._unfinished.discard(session_id)

    async def ping(self, session_id: str) -> None:
        """Keep the session alive; raises OrsSessionExpired once it is gone."""
        await self._run(self._ops.ping(session_id))

    async def aclose(self) -> None:
        """Delete open sessions (best effort, concurrently), stop pinging, close connections.

        Safe to call twice; the backend stays usable and reconnects on next use.
        """
        task, self._keepalive = self._keepalive, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._give_back()
        own, self._own = self._own, None
        if own is not None and self._own_loop is asyncio.get_running_loop():
            await own.aclose()
        self._own_loop = None

    async def _give_back(self) -> None:
        """Delete the open sessions and give back every id, concurrently, within
        ``CLOSE_TIMEOUT_S`` in all; a WARNING says how many were left."""
        sids, self._open, self._unfinished = [*self._open, *self._unfinished], set(), set()
        loop = asyncio.get_running_loop()
        work = [r for r in self._releases if r.get_loop() is loop]
        if self._own is not None or self._shared is not None:  # connected
            work += [asyncio.ensure_future(self._delete_quietly(sid)) for sid in sids]
            if self._ops.discovery_sid is not None:
                work.append(asyncio.ensure_future(
                    self._run(self._ops.release_discovery(timeout=BACKGROUND_TIMEOUT_S))))
        if not work:
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await asyncio.gather(*work, return_exceptions=True)
        except TimeoutError:
            left = sum(job.cancelled() or not job.done() for job in work)
            logger.warning("%s: close() gave up after %g s with %d of %d sessions or session "
                           "ids not given back; the server forgets them when they expire",
                           self.location, CLOSE_TIMEOUT_S, left, len(work))

    async def _release(self, sid: str) -> None:
        """Give back a session id ``/create`` never used (never raises but a cancellation).

        The release is a task of its own, so it runs on when the caller is cancelled
        (again) while waiting for it; ``aclose`` waits for the ones still running.
        """
        release = asyncio.ensure_future(
            self._run(self._ops.release(sid, timeout=BACKGROUND_TIMEOUT_S)))
        self._releases.add(release)
        release.add_done_callback(self._releases.discard)
        await asyncio.shield(release)

    async def _delete_quietly(self, sid: str) -> None:
        try:
            await self._run(self._ops.delete(sid, timeout=BACKGROUND_TIMEOUT_S))
        except OrsError as exc:
            logger.debug("delete of session %s at close failed: %s", sid, exc.message)

    # -- keepalive ------------------------------------------------------------------

    def _start_keepalive(self) -> None:
        interval = self.options.keepalive_interval
        if interval is None:
            return
        if self._keepalive is not None and not self._keepalive.done():
            return
        self._keepalive = asyncio.get_running_loop().create_task(
            _keepalive_loop(weakref.ref(self), interval),
            name=f"ors-keepalive {self.location}",
        )

    async def _ping_open_sessions(self) -> None:
        async def ping(sid: str) -> None:
            try:
                await self._run(self._ops.ping(sid, max_retries=0, timeout=BACKGROUND_TIMEOUT_S))
            except OrsSessionExpired:
                logger.debug("session %s is gone; no longer keeping it alive", sid)
                self._open.discard(sid)
            except Exception as exc:  # a missed ping is retried next tick; never end the task
                logger.debug("keepalive ping of session %s failed: %s", sid, exc)

        await asyncio.gather(*(ping(sid) for sid in list(self._open)))


async def _keepalive_loop(ref: weakref.ref[AsyncHttpBackend], interval: float) -> None:
    # Holds the backend only weakly, so dropping it without aclose() lets it be collected.
    while True:
        await asyncio.sleep(interval)
        backend = ref()
        if backend is None:
            return
        await backend._ping_open_sessions()
        del backend


async def _read(response: httpx.Response, step: Fetch | Stream, started: float) -> Answer:
    """The whole answer, decoded within the size cap (and the time limit of a ``Fetch``)."""
    headers = header_map(response.headers.raw)
    reader = step.reader(headers.get("content-encoding", ""))
    async for raw in _body(response):
        reader.feed(raw)
    return Answer(response.status_code, headers, reader.value(), time.monotonic() - started)


def _body(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive, content encoding not undone: the transport's
    stream itself (``aiter_raw`` adds bookkeeping the backend does not use)."""
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream), "an async transport's response"
    return stream.__aiter__()
