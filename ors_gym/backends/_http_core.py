"""The sans-IO half of the HTTP backend: what to send, how to read answers, when to retry.

Nothing here touches a socket or a clock of its own, so the synchronous
``HttpBackend`` and a future async twin share it, and the retry rules are
unit-testable without a server or a sleep. Wire details: /work/shared/ors-protocol.md.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ors_gym.errors import (
    OrsError,
    OrsHTTPError,
    OrsProtocolError,
    OrsRequestError,
    OrsServerError,
    OrsSessionExpired,
)

__all__ = [
    "RETRY_STATUSES",
    "SAFE_BEFORE_ACK",
    "RetryBudget",
    "RetryHint",
    "StreamAssembler",
    "Where",
    "build_headers",
    "decode_json",
    "encode_json",
    "error_detail",
    "parse_retry_after",
    "retry_hint",
    "secrets_header",
    "status_error",
]

#: Statuses a gateway or a starting server answers; retried with backoff (never 500).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Of those, the ones that prove a request was refused unprocessed, so even a
#: tool call that was never acknowledged may be sent again. A 502/504 may come
#: after the server received the call, so a tool call is not resent on them.
SAFE_BEFORE_ACK = frozenset({429, 503})
#: Cap on one backoff sleep, whatever Retry-After says.
MAX_DELAY = 30.0
#: Poll interval for a "starting" 503 without Retry-After (the SDK sends 2).
STARTING_POLL = 2.0
#: Longest server detail quoted in an error (an SDK 500 may carry a traceback).
_DETAIL_LIMIT = 2000


@dataclass(frozen=True)
class Where:
    """The context an error names: server, environment, session, tool."""

    server: str | None = None
    env_name: str | None = None
    session_id: str | None = None
    tool: str | None = None

    def kw(self) -> dict[str, str | None]:
        """As ``OrsError`` keyword arguments."""
        return {
            "server": self.server,
            "env_name": self.env_name,
            "session_id": self.session_id,
            "tool": self.tool,
        }


# -- requests -------------------------------------------------------------------


def secrets_header(secrets: Mapping[str, str]) -> str:
    """The ``X-Secrets`` value: standard base64 of ``{"KEY": {"value": "..."}}``."""
    for key, value in secrets.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                "secrets must map str names to str values, e.g. {'OPENAI_API_KEY': 'sk-...'}; "
                f"got a {type(value).__name__} value for a {type(key).__name__} key"
            )
    payload = {key: {"value": value} for key, value in secrets.items()}
    return base64.b64encode(json.dumps(payload).encode("utf-8")).decode("ascii")


def build_headers(
    *,
    api_key: str | None,
    session_id: str | None = None,
    secrets: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Per-request headers: API key, session id, secrets (the only place they travel)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["X-API-Key"] = api_key
    if session_id:
        headers["X-Session-ID"] = session_id
    if secrets:
        headers["X-Secrets"] = secrets_header(secrets)
    return headers


def _jsonable(value: Any) -> Any:
    # numpy scalars and arrays (what Gym code hands around) have tolist();
    # pydantic models (protocol Messages in score_group candidates) model_dump().
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def encode_json(payload: Any, *, what: str) -> bytes:
    """``payload`` as JSON bytes; numpy values become plain numbers and lists."""
    try:
        return json.dumps(payload, default=_jsonable, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"the body of {what} cannot be sent as JSON: {exc}. "
            "Pass only dicts, lists, str, int, float, bool and None."
        ) from None


# -- answers --------------------------------------------------------------------


def error_detail(body: bytes) -> str:
    """The server's explanation of an error answer: FastAPI's ``detail``, else the text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and "detail" in payload:
        detail = payload["detail"]
        text = detail if isinstance(detail, str) else json.dumps(detail)
    text = text or "(empty body)"
    if len(text) > _DETAIL_LIMIT:
        text = text[:_DETAIL_LIMIT] + " ...(truncated)"
    return text


def decode_json(body: bytes, content_type: str, *, what: str, where: Where) -> Any:
    """Parse a JSON answer, or raise OrsProtocolError if it is not JSON."""
    mime = content_type.partition(";")[0].strip().lower()
    if mime != "application/json" and not mime.endswith("+json"):
        raise OrsProtocolError(
            f"{what}: expected a JSON answer, got content type {mime or 'none'!r} "
            f"({_preview(body)}); check the URL points at an ORS server",
            **where.kw(),
        )
    try:
        return json.loads(body)
    except ValueError as exc:
        raise OrsProtocolError(
            f"{what}: the answer is not valid JSON ({exc}): {_preview(body)}", **where.kw()
        ) from None


def _preview(body: bytes, limit: int = 80) -> str:
    text = body[: limit + 1].decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _http_error(cls: type[OrsHTTPError], status: int, message: str, where: Where) -> OrsHTTPError:
    err = cls(message, **where.kw())
    err.status_code = status
    return err


def status_error(
    status: int, detail: str, *, what: str, where: Where, session: bool = False
) -> OrsError:
    """The error for a non-2xx answer that is not retried (or whose retries ran out).

    ``session`` marks endpoints that act on a session: there a 404/410 means the
    session is gone, except a 404 saying the environment does not implement the
    endpoint (``/score_group``).
    """
    if session and status in (404, 410) and "not implement" not in detail:
        return OrsSessionExpired(
            f"session {where.session_id} is gone on the server (deleted, reaped after 15 "
            "idle minutes, or the server restarted); call reset() to start a new episode "
            f"(server said {status}: {detail})",
            **where.kw(),
        )
    if status in (401, 403):
        return _http_error(
            OrsRequestError,
            status,
            f"{what} was refused ({status}: {detail}); check the api_key given to "
            "HttpBackend (sent as X-API-Key)",
            where,
        )
    if 400 <= status < 500:
        return _http_error(
            OrsRequestError, status, f"{what} was refused ({status}): {detail}", where
        )
    if status == 500:
        hint = (
            "this is a bug or a failed setup() in the environment; running it again "
            "gives the same answer, so ors_gym does not retry"
        )
    elif status == 503:
        hint = "the server is overloaded or still starting; retries ran out"
    else:
        hint = "the server or a gateway in front of it failed"
    return _http_error(
        OrsServerError, status, f"{what} failed on the server ({status}): {detail}; {hint}", where
    )


# -- retries --------------------------------------------------------------------


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header; only the delta-seconds form is honoured."""
    if value is None:
        return None
    value = value.strip()
    return float(value) if value.isdigit() else None


@dataclass(frozen=True)
class RetryHint:
    """Why a request may be sent again: the server's Retry-After and "starting" flag."""

    retry_after: float | None = None
    starting: bool = False


def retry_hint(status: int, headers: Mapping[str, str]) -> RetryHint | None:
    """A hint if ``status`` is retryable (429/502/503/504), else None (never a 500)."""
    if status not in RETRY_STATUSES:
        return None
    return RetryHint(
        retry_after=parse_retry_after(headers.get("retry-after")),
        starting=status == 503 and headers.get("x-backend-state", "").lower() == "starting",
    )


@dataclass
class RetryBudget:
    """How long to keep retrying one request, as in the reference client.

    Each failure spends one of ``max_retries`` (waiting ``backoff`` doubled per
    retry, or the server's Retry-After), except a 503 "starting" answer (the
    environment's ``setup()`` is still running): those are ridden out until
    ``starting_ride_out`` seconds after the first attempt, spending nothing.
    """

    max_retries: int
    backoff: float
    starting_ride_out: float
    started: float
    attempts: int = 0

    def next_delay(self, hint: RetryHint | None, now: float) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        retry_after = hint.retry_after if hint is not None else None
        if hint is not None and hint.starting:
            remaining = self.starting_ride_out - (now - self.started)
            if remaining <= 0:
                return None
            delay = STARTING_POLL if retry_after is None else retry_after
            return max(0.0, min(delay, MAX_DELAY, remaining))
        self.attempts += 1
        if self.attempts > self.max_retries:
            return None
        delay = self.backoff * 2 ** (self.attempts - 1) if retry_after is None else retry_after
        return max(0.0, min(delay, MAX_DELAY))


# -- SSE streams (/call, /score_group) -----------------------------------------------


class StreamAssembler:
    """Reassembles one SSE answer of ``/call`` or ``/score_group``.

    Feed it every event in order; it remembers the ``task_id`` (to resume with),
    joins ``chunk`` data and the final ``end`` data, and caps the total size.
    ``: ping`` comments never reach it (the SSE parser drops them).
    """

    def __init__(self, *, max_bytes: int, what: str, where: Where) -> None:
        self.max_bytes = max_bytes
        self.what = what
        self.where = where
        self.task_id: str | None = None
        self.error: str | None = None
        self._parts: list[str] = []
        self._size = 0
        self.done = False

    def feed(self, event: str, data: str) -> bool:
        """Take one event; True once the answer is complete (``end`` or ``error``)."""
        if event == "task_id":
            self.task_id = data.strip()
        elif event in ("chunk", "end"):
            self._size += len(data.encode("utf-8"))
            if self._size > self.max_bytes:
                raise OrsProtocolError(
                    f"{self.what}: the answer exceeds max_response_bytes={self.max_bytes}; "
                    "raise HttpBackend(max_response_bytes=...) if results this large are expected",
                    **self.where.kw(),
                )
            self._parts.append(data)
            self.done = event == "end"
        elif event == "error":
            self.error = data or "(no message)"
            self.done = True
        return self.done

    def result(self) -> Any:
        """The parsed JSON of the joined chunks (after ``feed`` returned True without error)."""
        text = "".join(self._parts)
        try:
            return json.loads(text)
        except ValueError as exc:
            raise OrsProtocolError(
                f"{self.what}: the streamed result is not valid JSON ({exc}); "
                f"{len(self._parts)} chunk(s), {len(text)} characters",
                **self.where.kw(),
            ) from None
