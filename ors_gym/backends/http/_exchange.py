"""One ORS JSON request, sans-IO: sent, redirected, retried, its answer checked.

``Exchange.request`` is a JSON request and ``Exchange.new_session_id`` a
hosted deployment's ``/create_session``; both are generators of steps (see
``_steps``) that ``AsyncHttpBackend`` performs, with time from a clock it
passes in. A tool call (``_calls``) is made with them. Here live the decisions,
testable with no socket: what to retry (429/502/503/504 and dropped
connections, never a 500, and not a refused connection: nothing listens, so
waiting only delays the error; see ``_retry`` for the budgets and the
process's rate limit), and where a redirect may lead (``Redirects``, below).

Redirects within the server keep every header; one to another origin drops
the credentials (API key, secrets, auth, the user's headers), so they reach
only the server they were meant for. A hosted deployment answers its bare
paths with a permanent redirect to its default environment
(``/prompt`` -> ``/echo/prompt``); once seen, later requests go there at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urljoin

from ors_gym.backends.base import Secrets, secret_values
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
    gate_for,
    retry_delay,
    retry_hint,
)
from ors_gym.backends.http._settings import Settings, Where, origin, url_of
from ors_gym.backends.http._sse import StreamAssembler
from ors_gym.backends.http._steps import (
    MISSING,
    Answer,
    Failure,
    Fetch,
    Op,
    Sleep,
    Stream,
    Streamed,
    TotalTime,
    timeout_error,
    transport_error,
)
from ors_gym.errors import OrsError, OrsProtocolError, redact_url

__all__ = ["MAX_REDIRECTS", "REDIRECTS", "Exchange", "Redirects"]

logger = logging.getLogger("ors_gym.http")

#: Redirect statuses followed (the SDK answers 308 for an unknown environment path).
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
#: Headers that never follow a redirect to another origin (credentials, secrets).
_CREDENTIALS = frozenset({"authorization", "x-api-key", "x-secrets", "cookie"})


class Exchange:
    """Requests to one server, as sans-IO generators; ``Ops`` holds one and builds the
    endpoints with it, and its ``ToolCalls`` makes tool calls with it.

    ``clock`` is the driver's monotonic clock (seconds).
    """

    def __init__(self, settings: Settings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.clock = clock
        self.redirects = Redirects(settings)
        scheme, host, port = origin(settings.location)
        self.gate = gate_for(f"{scheme}://{host}:{port}", settings.api_key)
        #: Values no error may show beside the API key: every secret and env override
        #: a session was opened with (an environment's error may quote what it read).
        self.hidden: set[str] = set()

    @property
    def location(self) -> str:
        return self.settings.location

    @property
    def default_segment(self) -> str | None:
        """Where a hosted deployment's bare paths lead, once a redirect showed it."""
        return self.redirects.default_segment

    def where(
        self, env_name: str | None = None, session_id: str | None = None, tool: str | None = None
    ) -> Where:
        return Where(self.settings.location, env_name, session_id, tool)

    def headers(
        self, session_id: str | None, secrets: Secrets | None = None,
        scoped: Mapping[str, tuple[str, list[str]]] | None = None,
    ) -> dict[str, str]:
        """Every header of a request: the user's, auth, API key, deployment, session id,
        secrets."""
        s = self.settings
        return build_headers(api_key=s.api_key, session_id=session_id, secrets=secrets,
                             extra=dict(s.headers), basic_auth=s.basic_auth,
                             deployment=s.deployment, scoped=scoped)

    def budget(self, max_retries: int | None = None, ride_out: float | None = None
               ) -> RetryBudget:
        """A new request's retry budget (the settings', unless overridden)."""
        return RetryBudget(self.settings, self.gate, self.clock(), max_retries=max_retries,
                           ride_out=ride_out)

    def detail(self, body: bytes, hide: Iterable[str] = ()) -> str:
        """What an error answer said, the API key and the values in ``hide`` (a request's
        secrets and env overrides) never shown."""
        return error_detail(body, hide=(self.settings.api_key, *self.hidden, *hide))

    def hide(self, values: Iterable[str]) -> None:
        """Keep ``values`` (a session's secrets and env overrides) out of every error."""
        self.hidden.update(v for v in values if isinstance(v, str) and len(v) >= 4)

    def answered(
        self, reply: Answer, method: str, target: str, headers: Any, hops: int,
        budget: RetryBudget, what: str, where: Where,
    ) -> tuple[tuple[str, Any], int] | None:
        """Take an answer: logged, counted as the process getting through unless it is a
        429, and, where it redirects, ``((target, headers), hops)`` of the next request."""
        log_answer(method, target, reply.status, reply.elapsed)
        if reply.status != 429:
            budget.through(self.clock())
        moved = self.redirects.follow(reply, target, hops, headers, what, where)
        return None if moved is None else (moved, hops + 1)

    def transport_error(self, what: str, where: Where, failure: Failure) -> OrsError:
        return transport_error(self.settings, what, where, failure)

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
        secrets: Secrets | None = None,
        fallback: frozenset[int] = frozenset(),
        max_retries: int | None = None,
        timeout: float | None = None,
        setup: bool = False,
        scoped: Mapping[str, tuple[str, list[str]]] | None = None,
        idempotent: bool = True,
    ) -> Op[Any]:
        """One JSON request with retries; returns the decoded answer.

        Answers with a status in ``fallback`` return ``MISSING`` instead of raising.
        Every ORS request is idempotent (``/create`` carries its session id), so a
        dropped connection is retried; a request that is not (``idempotent=False``)
        is sent again only when the server cannot have read it (a stale kept-alive
        connection, a connect that failed). A timeout is not retried (the server is
        slow, and asking again would not help), nor a refused connection. A ``setup``
        request (``/create``, ``/prompt``, ``/messages``: the environment's own
        code runs meanwhile) waits for ``setup_timeout`` in all, retries and
        "starting" answers included, as the SDK client waits, instead of ``timeout``
        (a server still "starting" after ``starting_ride_out`` fails sooner).
        """
        s = self.settings
        headers = self.headers(where.session_id, secrets, scoped)
        hidden_values = list(secret_values(secrets).values())
        content = None if body is None else encode_json(body, what=what)
        budget = self.budget(max_retries, min(s.setup_timeout, s.starting_ride_out)
                             if setup else None)
        end = self.clock() + s.setup_timeout if setup else None
        target, hops = path, 0
        returned = False
        try:
            while True:
                hint: RetryHint | None = None
                if end is not None:
                    timeout = max(end - self.clock(), 0.001)
                limit = s.timeout if timeout is None else timeout
                check = TotalTime(s, self.clock, self.clock() + limit, limit, what, where, setup)
                reply = yield Fetch(method, target, headers, content, timeout, what, where,
                                    s.max_response_bytes, check)
                if isinstance(reply, Failure):
                    if reply.kind in ("read_timeout", "timeout"):
                        raise timeout_error(s, what, where, reply, setup)
                    failure: OrsError = self.transport_error(what, where, reply)
                    if reply.final:
                        raise failure
                    if reply.kind == "stale":  # a kept-alive connection closed while idle
                        logger.debug("%s %s: %s; sending it again", method, target, reply.detail)
                        continue
                    if not idempotent and not reply.not_sent:
                        add_note(failure, "the server may have received it, so it is not "
                                 "sent again (it would act twice)")
                        raise failure
                else:
                    assert isinstance(reply, Answer), reply
                    status = reply.status
                    moved = self.answered(reply, method, target, headers, hops, budget, what,
                                          where)
                    if moved is not None:
                        (target, headers), hops = moved
                        continue
                    if 200 <= status < 300:
                        answer = decode_json(reply.body, reply.headers.get("content-type", ""),
                                             what=what, where=where)
                        returned = True
                        return answer
                    if status in fallback:
                        returned = True
                        return MISSING
                    failure = status_error(status, self.detail(reply.body, hidden_values),
                                           what=what, where=where, session=session,
                                           platform_api=s.platform_api)
                    hint = retry_hint(status, reply.headers)
                    if hint is None:
                        raise failure
                delay = retry_delay(budget, hint, failure, what, self.clock())
                if end is not None and self.clock() + delay >= end:
                    raise failure
                logger.debug("%s %s: retry %d in %.2f s (%s)", method, path, budget.tries,
                             delay, failure.message)
                yield Sleep(delay)
        finally:
            budget.finish(self.clock(), gave_up=not returned)

    # -- a server-issued session id -------------------------------------------------------

    def new_session_id(
        self, where: Where, secrets: Secrets | None = None,
        scoped: Mapping[str, tuple[str, list[str]]] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Op[str]:
        """A session id issued by the server: POST ``/create_session``, its ``task_id`` event.

        Retried as every request is (429/502/503/504 honouring ``Retry-After``, and
        dropped connections, within ``max_retries``; a 429 within
        ``rate_limit_timeout``): an id issued but never used costs the server
        nothing. Once the ``task_id`` event arrived the id is the server's, however
        the stream ends. A session's ``secrets`` go with it, as the SDK sends them
        (a gateway may provision with them), and ``body`` (the SDK's
        ``{"env": env_overrides}``) as the request's JSON.
        """
        s = self.settings
        what = "create a session id (POST /create_session)"
        headers = self.headers(None, secrets, scoped)
        budget = self.budget()
        target, hops = "/create_session", 0
        content = b"{}" if not body else encode_json(dict(body), what=what)
        # What a refusal may echo: the secrets, and the overrides' values (``{"env": ...}``).
        hidden = [*secret_values(secrets).values(), *_strings(body)]
        returned = False
        try:
            while True:
                hint: RetryHint | None = None
                sink = StreamAssembler(max_bytes=s.max_response_bytes, what=what, where=where)
                reply = yield Stream(target, headers, content, s.timeout, sink, what, where)
                if sink.task_id:
                    budget.through(self.clock())
                    returned = True
                    return sink.task_id
                if isinstance(reply, Streamed):
                    raise OrsProtocolError(
                        f"{what}: the stream ended without a task_id event; is this an ORS "
                        "session host?", **where.kw(),
                    )
                if isinstance(reply, Answer):
                    moved = self.answered(reply, "POST", target, headers, hops, budget, what,
                                          where)
                    if moved is not None:
                        (target, headers), hops = moved
                        continue
                    failure: OrsError = status_error(
                        reply.status, self.detail(reply.body, hidden), what=what, where=where
                    )
                    hint = retry_hint(reply.status, reply.headers)
                    if hint is None:
                        raise failure
                else:
                    assert isinstance(reply, Failure), reply
                    failure = self.transport_error(what, where, reply)
                    if reply.final:
                        raise failure
                    if reply.kind == "stale":
                        continue
                delay = retry_delay(budget, hint, failure, what, self.clock())
                logger.debug("POST /create_session: %s; retrying in %.2f s", failure.message,
                             delay)
                yield Sleep(delay)
        finally:
            budget.finish(self.clock(), gave_up=not returned)


def _strings(value: Any) -> list[str]:
    """Every str inside ``value`` (a JSON body)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def log_answer(method: str, path: str, status: int, elapsed: float) -> None:
    """A DEBUG line per answer (a redirect's whole URL without its credentials)."""
    shown = redact_url(path) if path.startswith(("http://", "https://")) else path
    logger.debug("%s %s -> %d in %.1f ms", method, shown, status, elapsed * 1000)


# -- redirects -------------------------------------------------------------------------


class Redirects:
    """Follows a server's redirects; remembers a hosted deployment's default path."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: Where a hosted deployment's bare paths lead, once a permanent redirect showed it.
        self.default_segment: str | None = None

    def follow(
        self, reply: Answer, current: str, hops: int, headers: dict[str, str], what: str,
        where: Where,
    ) -> tuple[str, dict[str, str]] | None:
        """Where a redirect answer leads, and the headers to send there; None if the
        answer is no redirect."""
        location = reply.headers.get("location") if reply.status in REDIRECTS else None
        if not location:
            return None
        base = self.settings.location
        url = urljoin(url_of(base, current), location.strip())
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
        if origin(url) != origin(base):
            dropped = _CREDENTIALS | {name.lower() for name in self.settings.headers}
            logger.debug("%s: redirected to another origin (%s); credentials not sent there",
                         what, redact_url(url))
            return url, {k: v for k, v in headers.items() if k.lower() not in dropped}
        if url == base or url.startswith(base + "/"):
            moved_to = url[len(base):] or "/"
            self._learn_default(reply.status, current, moved_to)
            return moved_to, headers
        return url, headers

    def _learn_default(self, status: int, current: str, moved_to: str) -> None:
        """Remember the environment a hosted deployment's bare paths are redirected to
        (the SDK server answers a bare path with a 308 to ``/{default}{path}``); the SDK
        client follows that redirect every time, ors_gym once."""
        if status not in (301, 308) or not self.settings.hosted or current.count("/") != 1:
            return
        segment, _, rest = moved_to.lstrip("/").partition("/")
        if segment and "/" + rest == current.split("?")[0] and self.default_segment is None:
            logger.debug("%s redirects bare paths to /%s; using it from now on",
                         self.settings.deployment, segment)
            self.default_segment = segment
