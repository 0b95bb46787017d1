"""One ORS request, sans-IO: sent, redirected, retried or resumed, its answer checked.

``Exchange.request`` is a JSON request and ``Exchange.stream`` an SSE tool
call; both are generators of steps (see ``_steps``) that ``AsyncHttpBackend``
performs, with time from a clock it passes in. Here live the protocol's
decisions, testable with no socket: what to retry (429/502/503/504 and dropped
connections, never a 500, and not a refused connection: nothing listens, so
waiting only delays the error), when a tool call may be sent again (only when
it surely never ran, or by its ``task_id`` once acknowledged), where a
redirect may lead and which headers may follow it.

A tool call before its ``task_id``: an answer with a status (429, 502, 503,
504 from the server or any front door, whatever its body) means the call's
stream never began, and the ORS server starts a tool only after it sent its
own 200 (the reference server writes its headers, then starts the task that
runs the tool, then sends ``task_id``), so the call is sent again. A
connection that fails before the request was sent is sent again too. A
connection cut after the request went out and before ``task_id`` arrived is
not: the tool may be running, and resending could run it twice; that call
raises ``OrsConnectionError`` (the episode's state is uncertain).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urljoin

from ors_gym.backends.http._codec import (
    build_headers,
    decode_json,
    encode_json,
    error_detail,
    status_error,
)
from ors_gym.backends.http._retry import (
    RetryBudget,
    RetryHint,
    add_note,
    retry_delay,
    retry_hint,
)
from ors_gym.backends.http._settings import Settings, Where, origin, url_of
from ors_gym.backends.http._sse import HEARTBEAT_S, StreamAssembler
from ors_gym.backends.http._steps import (
    MISSING,
    Answer,
    Failure,
    Fetch,
    Op,
    Sleep,
    Stream,
    Streamed,
)
from ors_gym.errors import (
    OrsConnectionError,
    OrsError,
    OrsProtocolError,
    OrsTimeoutError,
    OrsToolError,
    redact_url,
)

__all__ = ["MAX_REDIRECTS", "REDIRECTS", "Exchange"]

#: Redirect statuses followed (the SDK answers 308 for an unknown environment path).
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
#: Headers that never follow a redirect to another origin (credentials, secrets).
_CREDENTIALS = frozenset({"authorization", "x-api-key", "x-secrets", "cookie"})

logger = logging.getLogger("ors_gym.http")


class Exchange:
    """Requests to one server, as sans-IO generators; ``Ops`` builds the endpoints on it.

    ``clock`` is the driver's monotonic clock (seconds).
    """

    def __init__(self, settings: Settings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.clock = clock
        #: Where a hosted deployment's bare paths lead (``/prompt`` -> ``/echo/prompt``),
        #: once a permanent redirect showed it; None until then.
        self.default_segment: str | None = None

    @property
    def location(self) -> str:
        return self.settings.location

    def where(
        self, env_name: str | None = None, session_id: str | None = None, tool: str | None = None
    ) -> Where:
        return Where(self.settings.location, env_name, session_id, tool)

    def headers(
        self, session_id: str | None, secrets: Mapping[str, str] | None = None,
        scoped: Mapping[str, tuple[str, list[str]]] | None = None,
    ) -> dict[str, str]:
        """Every header of a request: the user's, auth, API key, deployment, session id,
        secrets."""
        s = self.settings
        return build_headers(api_key=s.api_key, session_id=session_id, secrets=secrets,
                             extra=dict(s.headers), basic_auth=s.basic_auth,
                             deployment=s.deployment, scoped=scoped)

    def _budget(
        self, max_retries: int | None = None, ride_out: float | None = None
    ) -> RetryBudget:
        s = self.settings
        return RetryBudget(
            max_retries=s.max_retries if max_retries is None else max_retries,
            backoff=s.backoff,
            starting_ride_out=s.starting_ride_out if ride_out is None else ride_out,
            started=self.clock(),
            how_to_set=s.how_to_set("max_retries"),
        )

    def _detail(self, body: bytes) -> str:
        return error_detail(body, hide=self.settings.api_key)

    # -- one JSON request ---------------------------------------------------------------

    def request(
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
        setup: bool = False,
        scoped: Mapping[str, tuple[str, list[str]]] | None = None,
    ) -> Op[Any]:
        """One JSON request with retries; returns the decoded answer.

        Answers with a status in ``fallback`` return ``MISSING`` instead of raising.
        Every request used here is idempotent (``/create`` carries its session id),
        so a dropped connection is retried; a timeout is not (the server is slow,
        and asking again would not help), nor a refused connection. A ``setup``
        request (``/create``, ``/prompt``, ``/messages``: the environment's own
        code runs meanwhile) waits for ``setup_timeout`` in all, retries and
        "starting" answers included, as the SDK client waits, instead of ``timeout``
        (a server still "starting" after ``starting_ride_out`` fails sooner).
        """
        s = self.settings
        headers = self.headers(where.session_id, secrets, scoped)
        content = None if body is None else encode_json(body, what=what)
        budget = self._budget(
            max_retries, min(s.setup_timeout, s.starting_ride_out) if setup else None
        )
        end = self.clock() + s.setup_timeout if setup else None
        target, hops = path, 0
        while True:
            hint: RetryHint | None = None
            if end is not None:
                timeout = max(end - self.clock(), 0.001)
            limit = s.timeout if timeout is None else timeout
            check = _TotalTime(self, self.clock() + limit, limit, what, where, setup)
            reply = yield Fetch(method, target, headers, content, timeout, what, where,
                                s.max_response_bytes, check)
            if isinstance(reply, Failure):
                if reply.kind in ("read_timeout", "timeout"):
                    raise self.timeout_error(what, where, reply, setup)
                failure: OrsError = self.transport_error(what, where, reply)
                if reply.kind == "refused":
                    raise failure
            else:
                assert isinstance(reply, Answer), reply
                status = reply.status
                _log(method, target, status, reply.elapsed)
                moved = self._redirect(reply, target, hops, headers, what, where)
                if moved is not None:
                    (target, headers), hops = moved, hops + 1
                    continue
                if 200 <= status < 300:
                    return decode_json(
                        reply.body, reply.headers.get("content-type", ""), what=what, where=where
                    )
                if status in fallback:
                    return MISSING
                failure = status_error(
                    status, self._detail(reply.body), what=what, where=where, session=session
                )
                hint = retry_hint(status, reply.headers)
                if hint is None:
                    raise failure
            delay = retry_delay(budget, hint, failure, what, self.clock())
            if end is not None:
                if self.clock() + delay >= end:
                    raise failure
            logger.debug("%s %s: retry %d in %.2f s (%s)", method, path, budget.attempts,
                         delay, failure.message)
            yield Sleep(delay)

    # -- a server-issued session id -------------------------------------------------------

    def new_session_id(
        self, where: Where, secrets: Mapping[str, str] | None = None,
        scoped: Mapping[str, tuple[str, list[str]]] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Op[str]:
        """A session id issued by the server: POST ``/create_session``, its ``task_id`` event.

        Retried as the SDK retries it (429/502/503/504 honouring ``Retry-After``, and
        dropped connections, up to three times): an id issued but never used costs
        the server nothing. Once the ``task_id`` event arrived the id is the
        server's, however the stream ends. A session's ``secrets`` go with it, as
        the SDK sends them (a gateway may provision with them), and ``body`` (the SDK's
        ``{"env": env_overrides}``) as the request's JSON.
        """
        s = self.settings
        what = "create a session id (POST /create_session)"
        headers = self.headers(None, secrets, scoped)
        budget = self._budget(max_retries=min(s.max_retries, 3))
        target, hops = "/create_session", 0
        content = b"{}" if not body else encode_json(dict(body), what=what)
        while True:
            hint: RetryHint | None = None
            sink = StreamAssembler(max_bytes=s.max_response_bytes, what=what, where=where)
            reply = yield Stream(target, headers, content, s.timeout, sink, what, where)
            if sink.task_id:
                return sink.task_id
            if isinstance(reply, Streamed):
                raise OrsProtocolError(
                    f"{what}: the stream ended without a task_id event; is this an ORS "
                    "session host?", **where.kw(),
                )
            if isinstance(reply, Answer):
                _log("POST", target, reply.status, reply.elapsed)
                moved = self._redirect(reply, target, hops, headers, what, where)
                if moved is not None:
                    (target, headers), hops = moved, hops + 1
                    continue
                failure: OrsError = status_error(
                    reply.status, self._detail(reply.body), what=what, where=where
                )
                hint = retry_hint(reply.status, reply.headers)
                if hint is None:
                    raise failure
            else:
                assert isinstance(reply, Failure), reply
                failure = self.transport_error(what, where, reply)
                if reply.kind == "refused":
                    raise failure
            delay = retry_delay(budget, hint, failure, what, self.clock())
            logger.debug("POST /create_session: %s; retrying in %.2f s", failure.message, delay)
            yield Sleep(delay)

    # -- one SSE tool call ----------------------------------------------------------------

    def stream(self, path: str, body: dict[str, Any], *, what: str, where: Where) -> Op[Any]:
        """POST a ``/call``-style request and reassemble its SSE answer, resuming drops.

        Once the server acknowledged the call (``task_id`` event), a dropped stream
        is re-POSTed with that id and the server replays or awaits the one run.
        Before that, the request is resent only if it surely never ran (a
        429/502/503/504 answer, a request never sent): otherwise the tool may have
        run. A refused connection before the acknowledgement fails at once.
        """
        s = self.settings
        headers = self.headers(where.session_id)
        budget = self._budget()
        deadline = None if s.call_timeout is None else self.clock() + s.call_timeout
        task_id: str | None = None
        target, hops = path, 0
        while True:
            hint: RetryHint | None = None
            safe = False  # the failure proves the call did not run
            read_timeout = HEARTBEAT_S
            if deadline is not None:
                read_timeout = min(read_timeout, max(deadline - self.clock(), 0.001))
            sent_task_id = task_id
            sink = StreamAssembler(
                max_bytes=s.max_response_bytes,
                what=what,
                where=where,
                deadline=None if deadline is None else _Deadline(self, deadline, what, where),
            )
            content = encode_json({**body, "task_id": sent_task_id}, what=what)
            reply = yield Stream(target, headers, content, read_timeout, sink, what, where)
            task_id = sink.task_id or task_id
            if isinstance(reply, Streamed):
                _log("POST", target, 200, reply.elapsed)
                if sink.done:
                    return self._finish_stream(sink, sent_task_id, what, where)
                failure: OrsError = OrsConnectionError(
                    f"{what}: the stream ended before its result", **where.kw()
                )
            elif isinstance(reply, Answer):
                _log("POST", target, reply.status, reply.elapsed)
                moved = self._redirect(reply, target, hops, headers, what, where)
                if moved is not None:  # a redirect answer: the call did not run
                    (target, headers), hops = moved, hops + 1
                    continue
                failure = status_error(
                    reply.status, self._detail(reply.body), what=what, where=where, session=True
                )
                hint = retry_hint(reply.status, reply.headers)
                if hint is None:
                    raise failure
                # An answer with a status came before the call's stream: the server had
                # not started the tool (see the module docstring for why).
                safe = True
                if task_id is None:
                    add_note(failure, "the tool had not started")
            else:
                assert isinstance(reply, Failure), reply
                if deadline is not None:
                    self.check_deadline(deadline, what, where)
                if reply.kind == "read_timeout":
                    failure = OrsConnectionError(
                        f"{what}: the stream went silent for {read_timeout:.0f} s although "
                        "the server pings every 10 s",
                        **where.kw(),
                    )
                elif task_id is not None and reply.kind != "refused":
                    failure = OrsConnectionError(
                        f"{what}: the stream was cut after the server acknowledged the call "
                        f"as task {task_id} ({reply.error_type}: {reply.detail or 'no detail'}); "
                        "it is resumed by that task_id, so the tool runs once",
                        **where.kw(),
                    )
                else:
                    failure = self.transport_error(what, where, reply)
                if reply.kind == "refused" and task_id is None:
                    raise failure
                safe = reply.not_sent
            if task_id is None and not safe:
                raise OrsConnectionError(
                    f"{failure.message}; the server had not acknowledged the call, so "
                    "ors_gym cannot know whether the tool ran and does not resend it "
                    "(it could run twice); the episode's state is uncertain, call reset()",
                    **where.kw(),
                )
            delay = retry_delay(budget, hint, failure, what, self.clock())
            if deadline is not None:
                delay = min(delay, max(deadline - self.clock(), 0.0))
            logger.debug("POST %s: %s; %s in %.2f s", path, failure.message,
                         "resuming" if task_id else "retrying", delay)
            yield Sleep(delay)

    def _finish_stream(
        self, sink: StreamAssembler, sent_task_id: str | None, what: str, where: Where
    ) -> Any:
        if sink.error is None:
            return sink.result()
        if sent_task_id is not None and sink.error.strip() == "unknown task_id":
            raise OrsConnectionError(
                f"{what}: the stream dropped and the server no longer knows call "
                f"{sent_task_id} (it restarted, or the result expired 60 s after the tool "
                "finished); the tool may have run, call reset()",
                **where.kw(),
            )
        raise OrsToolError(
            f"{what} raised on the server: {sink.error}. The tool raised on the "
            "server; this is a bug in the environment, not the agent",
            **where.kw(),
        )

    def _redirect(
        self, reply: Answer, current: str, hops: int, headers: dict[str, str], what: str,
        where: Where,
    ) -> tuple[str, dict[str, str]] | None:
        """Where a redirect answer leads, and the headers to send there; None if no redirect.

        Redirects within the server keep every header. One to another origin
        drops the credentials (API key, secrets, auth, the user's headers), so
        they reach only the server they were meant for.
        """
        location = reply.headers.get("location") if reply.status in REDIRECTS else None
        if not location:
            return None
        url = urljoin(url_of(self.location, current), location.strip())
        if hops >= MAX_REDIRECTS:
            raise OrsProtocolError(
                f"{what}: the server redirected more than {MAX_REDIRECTS} times, last to "
                f"{redact_url(url)} (a redirect loop?); check the base URL",
                **where.kw(),
            )
        if not url.startswith(("http://", "https://")):
            raise OrsProtocolError(
                f"{what}: the server redirected to {redact_url(url)!r}, not an http(s) URL",
                **where.kw(),
            )
        base = self.location
        if origin(url) != origin(base):
            extra = {name.lower() for name in self.settings.headers}
            dropped = _CREDENTIALS | extra
            logger.debug("%s: redirected to another origin (%s); credentials not sent there",
                         what, redact_url(url))
            return url, {k: v for k, v in headers.items() if k.lower() not in dropped}
        if url == base or url.startswith(base + "/"):
            moved_to = url[len(base):] or "/"
            self._learn_default(reply.status, current, moved_to)
            return moved_to, headers
        return url, headers

    def _learn_default(self, status: int, current: str, moved_to: str) -> None:
        """Remember the environment a hosted deployment's bare paths are redirected to.

        The SDK server answers a bare path with a permanent redirect (308) to
        ``/{default}{path}``; later requests go there at once, saving a round trip
        per request (the SDK client follows the redirect every time).
        """
        if status not in (301, 308) or not self.settings.hosted or current.count("/") != 1:
            return
        segment, _, rest = moved_to.lstrip("/").partition("/")
        if segment and "/" + rest == current.split("?")[0] and self.default_segment is None:
            logger.debug("%s redirects bare paths to /%s; using it from now on",
                         self.settings.deployment, segment)
            self.default_segment = segment

    # -- errors for requests that got no answer -------------------------------------------

    def transport_error(self, what: str, where: Where, failure: Failure) -> OrsConnectionError:
        """The error for a request that got no answer (refused, timed out, dropped)."""
        s = self.settings
        if s.hosted and failure.kind in ("refused", "connect_timeout"):
            error = OrsTimeoutError if failure.kind == "connect_timeout" else OrsConnectionError
            return error(
                f"{what}: cannot reach the OpenReward {s.hosted_note()} "
                f"({failure.error_type}: {failure.detail}); check the network and those "
                "variables",
                **where.kw(),
            )
        if failure.kind == "connect_timeout":
            return OrsTimeoutError(
                f"cannot reach the ORS server at {s.location}: no connection within "
                f"connect_timeout={s.connect_timeout} s; is it running? raise "
                f"{s.how_to_set('connect_timeout')} for a slow network",
                **where.kw(),
            )
        if failure.kind == "refused":
            return OrsConnectionError(
                f"cannot reach the ORS server at {s.location}: {failure.detail}; is it "
                "running? start one with `ors-gym serve`",
                **where.kw(),
            )
        return OrsConnectionError(
            f"{what}: the connection to {s.location} failed "
            f"({failure.error_type}: {failure.detail})",
            **where.kw(),
        )

    def timeout_error(
        self, what: str, where: Where, failure: Failure, setup: bool = False
    ) -> OrsTimeoutError:
        """The error for a request whose answer did not come within ``timeout``
        (``setup_timeout`` for a ``setup`` request)."""
        s = self.settings
        name, limit = ("setup_timeout", s.setup_timeout) if setup else ("timeout", s.timeout)
        return OrsTimeoutError(
            f"{what}: no answer from {s.location} within {name}={limit} s "
            f"({failure.error_type}); raise {s.how_to_set(name)} if the server is slow",
            **where.kw(),
        )

    def check_deadline(self, deadline: float, what: str, where: Where) -> None:
        """Raise OrsTimeoutError once a tool call's ``call_timeout`` has passed."""
        if self.clock() >= deadline:
            s = self.settings
            raise OrsTimeoutError(
                f"{what} did not finish within call_timeout={s.call_timeout} s; the tool may "
                f"still be running on the server. Raise {s.how_to_set('call_timeout')} or pass "
                "None to wait as long as the server keeps the stream alive",
                **where.kw(),
            )


class _TotalTime:
    """The check a ``BodyReader`` runs after each piece: the request's time is up."""

    __slots__ = ("deadline", "exchange", "limit", "name", "what", "where")

    def __init__(
        self, exchange: Exchange, deadline: float, limit: float, what: str, where: Where,
        setup: bool = False,
    ) -> None:
        self.exchange = exchange
        self.deadline = deadline
        self.limit = exchange.settings.setup_timeout if setup else limit
        self.name = "setup_timeout" if setup else "timeout"
        self.what = what
        self.where = where

    def __call__(self) -> None:
        if self.exchange.clock() >= self.deadline:
            s = self.exchange.settings
            raise OrsTimeoutError(
                f"{self.what}: the answer from {s.location} was still arriving after "
                f"{self.name}={self.limit} s; raise {s.how_to_set(self.name)} if the "
                "server is slow",
                **self.where.kw(),
            )


class _Deadline:
    """The ``call_timeout`` check a ``StreamAssembler`` runs after each piece."""

    __slots__ = ("deadline", "exchange", "what", "where")

    def __init__(self, exchange: Exchange, deadline: float, what: str, where: Where) -> None:
        self.exchange = exchange
        self.deadline = deadline
        self.what = what
        self.where = where

    def __call__(self) -> None:
        self.exchange.check_deadline(self.deadline, self.what, self.where)


def _log(method: str, path: str, status: int, elapsed: float) -> None:
    shown = redact_url(path) if path.startswith(("http://", "https://")) else path
    logger.debug("%s %s -> %d in %.1f ms", method, shown, status, elapsed * 1000)
