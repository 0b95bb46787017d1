"""The sans-IO half of the HTTP backends: what to send, how to read answers, when to retry.

Nothing here touches a socket, and time comes from a clock the transport
passes in. Every backend method is written once, as a generator in ``Ops``
that yields transport steps (``Fetch`` a JSON answer, ``Stream`` an SSE
answer, ``Sleep`` before a retry) and receives what happened (``Answer``,
``Streamed``, ``Failure``). The synchronous ``HttpBackend`` and the asyncio
``AsyncHttpBackend`` only perform those steps, so the retry and resume
decisions, request building and result parsing are shared, and testable
without a server or a sleep. Wire details: /work/shared/ors-protocol.md.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
import zlib
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import unquote, urljoin, urlsplit

from ors_gym.errors import (
    OrsConnectionError,
    OrsError,
    OrsHTTPError,
    OrsProtocolError,
    OrsRequestError,
    OrsServerError,
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
    check_secrets,
    check_task_source,
    parse,
)

__all__ = [
    "MISSING",
    "RETRY_STATUSES",
    "SAFE_BEFORE_ACK",
    "Answer",
    "BodyDecoder",
    "BodyReader",
    "Failure",
    "Fetch",
    "Op",
    "Ops",
    "RetryBudget",
    "RetryHint",
    "SSEParser",
    "Settings",
    "Sleep",
    "Stream",
    "StreamAssembler",
    "Streamed",
    "Where",
    "build_headers",
    "check_keepalive",
    "decode_json",
    "encode_json",
    "error_detail",
    "parse_retry_after",
    "require_sse",
    "retry_hint",
    "secrets_header",
    "split_base_url",
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
#: The SDK server sends ``: ping`` every 10 s while a tool runs; this much silence
#: on a tool-call stream means the connection is dead, so the call is resumed.
HEARTBEAT_S = 45.0
#: Redirect statuses followed (the SDK answers 308 for an unknown environment path).
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
#: Headers that never follow a redirect to another origin (credentials, secrets).
_CREDENTIALS = frozenset({"authorization", "x-api-key", "x-secrets", "cookie"})
#: Content encodings ``BodyDecoder`` undoes (and so the only ones asked for).
ACCEPT_ENCODING = "gzip, deflate"

logger = logging.getLogger("ors_gym.http")
_T = TypeVar("_T")


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
    payload = {key: {"value": value} for key, value in check_secrets(secrets).items()}
    return base64.b64encode(json.dumps(payload).encode("utf-8")).decode("ascii")


def build_headers(
    *,
    api_key: str | None,
    session_id: str | None = None,
    secrets: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    basic_auth: str | None = None,
) -> dict[str, str]:
    """Per-request headers: the user's ``extra`` ones, basic auth, API key, session id,
    secrets (the only place they travel)."""
    headers = dict(extra or {})
    headers["Content-Type"] = "application/json"
    headers["Accept-Encoding"] = ACCEPT_ENCODING
    if basic_auth:
        headers["Authorization"] = basic_auth
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


# -- answer bodies: content decoding and SSE, both within the size cap ----------------


def _too_big(what: str, max_bytes: int, where: Where) -> OrsProtocolError:
    return OrsProtocolError(
        f"{what}: the answer exceeds max_response_bytes={max_bytes}; raise the backend's "
        "max_response_bytes if answers this large are expected",
        **where.kw(),
    )


class BodyDecoder:
    """Undoes an answer's ``Content-Encoding`` (gzip, deflate) as bytes arrive.

    The size cap applies to the decoded bytes while inflating, never after: a
    small compressed answer that would inflate past ``max_bytes`` (a "zip
    bomb") is refused having used about ``max_bytes`` of memory.
    """

    def __init__(self, content_encoding: str, *, max_bytes: int, what: str, where: Where) -> None:
        self.max_bytes = max_bytes
        self.what = what
        self.where = where
        self.size = 0
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        self._z: Any = None
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise OrsProtocolError(
                f"{what}: the answer is encoded as {content_encoding!r}, which ors_gym did not "
                f"ask for (it accepts {ACCEPT_ENCODING})",
                **where.kw(),
            )
        self.coding = codings[0] if codings else None
        if self.coding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.coding == "deflate":
            self._z = zlib.decompressobj()
        self._first = True

    def feed(self, raw: bytes) -> bytes:
        """Decoded bytes for ``raw``; raises OrsProtocolError past the cap or on bad data."""
        if self._z is None:
            self.size += len(raw)
            if self.size > self.max_bytes:
                raise _too_big(self.what, self.max_bytes, self.where)
            return raw
        out = bytearray()
        data = raw
        while data:
            try:
                piece = self._z.decompress(data, self.max_bytes - self.size + 1)
            except zlib.error as exc:
                if self.coding == "deflate" and self._first:  # raw deflate, no zlib header
                    self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                    self._first = False
                    continue
                raise OrsProtocolError(
                    f"{self.what}: the answer's {self.coding} encoding is corrupt ({exc}); "
                    "the server or a proxy in front of it compressed it wrongly",
                    **self.where.kw(),
                ) from None
            self._first = False
            self.size += len(piece)
            if self.size > self.max_bytes:
                raise _too_big(self.what, self.max_bytes, self.where)
            out += piece
            data = self._z.unconsumed_tail
        return bytes(out)


class BodyReader:
    """Collects a whole answer body: decoded, within the size cap and the time limit.

    ``check`` (if given) runs after every piece: it raises once the request's
    time is up, so an answer trickling in byte by byte cannot outlast it.
    """

    def __init__(
        self,
        content_encoding: str,
        *,
        max_bytes: int,
        what: str,
        where: Where,
        check: Callable[[], None] | None = None,
    ) -> None:
        self._decoder = BodyDecoder(content_encoding, max_bytes=max_bytes, what=what,
                                    where=where)
        self._body = bytearray()
        self._check = check

    def feed(self, raw: bytes) -> None:
        self._body += self._decoder.feed(raw)
        if self._check is not None:
            self._check()

    def value(self) -> bytes:
        return bytes(self._body)


_LINE_END = re.compile(rb"\r\n|\r|\n")


class SSEParser:
    """Server-sent events from bytes, per the HTML standard's parsing rules.

    Lines end in CRLF, LF or CR; ``field: value`` loses exactly one space after
    the colon (not all whitespace: a 4096-character chunk may start with
    spaces); ``data`` lines join with LF; comment lines (``: ping``) are
    skipped; a blank line dispatches the event. ``id`` and ``retry`` are ignored.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._skip_lf = False  # the last chunk ended in CR: a leading LF belongs to it
        self._event = ""
        self._data: list[str] = []
        self._seen = False

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        """The events completed by ``data``, as ``(event, data)`` pairs."""
        if self._skip_lf and data[:1] == b"\n":
            data = data[1:]
        self._skip_lf = False
        buffer = self._buffer + data if self._buffer else data
        events: list[tuple[str, str]] = []
        start = 0
        for match in _LINE_END.finditer(buffer):
            if match.group() == b"\r" and match.end() == len(buffer):
                self._skip_lf = True
            self._line(buffer[start:match.start()], events)
            start = match.end()
        self._buffer = buffer[start:]
        return events

    def _line(self, raw: bytes, events: list[tuple[str, str]]) -> None:
        if not raw:
            if self._seen:
                events.append((self._event or "message", "\n".join(self._data)))
            self._event, self._data, self._seen = "", [], False
            return
        line = raw.decode("utf-8", "replace")
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event, self._seen = value, True
        elif name == "data":
            self._data.append(value)
            self._seen = True


# -- SSE streams (/call, /score_group) -----------------------------------------------


class StreamAssembler:
    """Reassembles one SSE answer of ``/call`` or ``/score_group``.

    Feed it every event in order; it remembers the ``task_id`` (to resume with),
    joins ``chunk`` data and the final ``end`` data, and caps the total size.
    ``: ping`` comments never reach it (the SSE parser drops them).
    """

    def __init__(
        self,
        *,
        max_bytes: int,
        what: str,
        where: Where,
        deadline: Callable[[], None] | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.what = what
        self.where = where
        self.task_id: str | None = None
        self.error: str | None = None
        self._parts: list[str] = []
        self._size = 0
        self.done = False
        self._deadline = deadline
        self._decoder: BodyDecoder | None = None
        self._parser = SSEParser()

    def start(self, content_encoding: str = "") -> None:
        """Begin reading the stream's raw bytes (with ``feed_bytes``)."""
        self._decoder = BodyDecoder(content_encoding, max_bytes=self.max_bytes, what=self.what,
                                    where=self.where)

    def feed_bytes(self, raw: bytes) -> bool:
        """Take raw bytes of the stream; True once the answer is complete.

        Everything the server sends counts toward the size cap (pings too), and
        the call's deadline is checked after every piece, events or not.
        """
        if self._decoder is None:
            self.start()
        assert self._decoder is not None
        for event, data in self._parser.feed(self._decoder.feed(raw)):
            if self._feed(event, data):
                return True
        if self._deadline is not None:
            self._deadline()
        return False

    def feed(self, event: str, data: str) -> bool:
        """Take one event; True once the answer is complete (``end`` or ``error``).

        Raises OrsTimeoutError after an event that leaves the answer incomplete
        once the call's deadline (``call_timeout``) has passed.
        """
        if not self._feed(event, data) and self._deadline is not None:
            self._deadline()
        return self.done

    def _feed(self, event: str, data: str) -> bool:
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


# -- settings ---------------------------------------------------------------------------


def split_base_url(base_url: str, owner: str = "HttpBackend") -> tuple[str, tuple[str, str] | None]:
    """``base_url`` without user-info and trailing slash, and that user-info as basic auth.

    User-info in the URL becomes basic auth, so no URL that is logged carries it.
    """
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(
            f"{owner} base_url must be an http(s) URL such as 'http://127.0.0.1:8080', "
            f"got {redact_url(str(base_url))!r}"
        )
    parts = urlsplit(base_url)
    auth = (
        (unquote(parts.username or ""), unquote(parts.password or ""))
        if parts.username or parts.password
        else None
    )
    return (redact_url(base_url) or base_url).rstrip("/"), auth


def basic_auth_header(auth: tuple[str, str] | None) -> str | None:
    """The ``Authorization`` value for user-info ``(user, password)`` (as httpx sends it)."""
    if auth is None:
        return None
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
    return f"Basic {token}"


def url_of(location: str, path: str) -> str:
    """The absolute URL of a step's ``path`` (a path under ``location``, or a whole URL)."""
    return path if path.startswith(("http://", "https://")) else location + path


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def check_keepalive(interval: float | None) -> None:
    """Reject a keepalive interval that is not positive (None turns keepalive off)."""
    if interval is not None and interval <= 0:
        raise ValueError(f"keepalive_interval must be positive or None (off), got {interval}")


@dataclass(frozen=True)
class Settings:
    """What both transports share: where the server is and how patient to be.

    ``owner`` names the backend class in messages that tell the user which
    setting to change. The API key is never part of the repr.
    """

    location: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 30.0
    connect_timeout: float = 5.0
    call_timeout: float | None = None
    max_retries: int = 5
    backoff: float = 0.5
    starting_ride_out: float = 600.0
    max_response_bytes: int = 64 * 1024 * 1024
    owner: str = "HttpBackend"
    #: The user's extra headers, and basic auth from the URL's user-info: sent to the
    #: server only (dropped when a redirect leads to another origin).
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    basic_auth: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name, value in (("timeout", self.timeout), ("connect_timeout", self.connect_timeout)):
            if value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        if self.call_timeout is not None and self.call_timeout <= 0:
            raise ValueError(f"call_timeout must be positive or None, got {self.call_timeout}")
        if self.max_response_bytes <= 0:
            raise ValueError(
                f"max_response_bytes must be positive, got {self.max_response_bytes}"
            )
        if self.max_retries < 0 or self.backoff < 0:
            raise ValueError("max_retries and backoff must not be negative")


# -- transport steps: what an operation asks its transport to do -------------------------


@dataclass(frozen=True)
class Fetch:
    """Send one request and read its whole answer into ``reader(content_encoding)``.

    ``path`` is under the server's URL, or a whole URL (after a redirect).
    ``timeout`` overrides the settings' ``timeout`` for this request; the
    reader also ends an answer that trickles in for longer than that.
    """

    method: str
    path: str
    headers: dict[str, str]
    content: bytes | None
    timeout: float | None
    what: str
    where: Where
    max_bytes: int = 64 * 1024 * 1024
    check: Callable[[], None] | None = None

    def reader(self, content_encoding: str) -> BodyReader:
        return BodyReader(content_encoding, max_bytes=self.max_bytes, what=self.what,
                          where=self.where, check=self.check)


@dataclass(frozen=True)
class Stream:
    """POST ``content``; a 200 answer's raw bytes go to ``sink.feed_bytes`` (after
    ``sink.start(content_encoding)``) until it returns True, any other answer is
    read whole into ``reader(content_encoding)``.

    ``read_timeout`` is the longest silence allowed between two bytes.
    """

    path: str
    headers: dict[str, str]
    content: bytes
    read_timeout: float
    sink: StreamAssembler
    what: str
    where: Where

    def reader(self, content_encoding: str) -> BodyReader:
        return BodyReader(content_encoding, max_bytes=self.sink.max_bytes, what=self.what,
                          where=self.where)


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` before the next attempt."""

    seconds: float


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: to a ``Fetch``, or a ``Stream`` whose status was not 200."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    elapsed: float = 0.0


@dataclass(frozen=True)
class Streamed:
    """A ``Stream`` answered 200 and was read until its sink was done or the stream ended."""

    elapsed: float = 0.0


FailureKind = Literal["refused", "connect_timeout", "read_timeout", "timeout", "broken"]


@dataclass(frozen=True)
class Failure:
    """A request that got no HTTP answer.

    ``refused`` and ``connect_timeout`` prove the request never left this
    machine (``not_sent``); ``read_timeout`` is silence from a connected server;
    ``timeout`` any other timeout (write, pool); ``broken`` a dropped connection.
    """

    kind: FailureKind
    error_type: str
    detail: str

    @property
    def not_sent(self) -> bool:
        return self.kind in ("refused", "connect_timeout")


Step = Fetch | Stream | Sleep
Reply = Answer | Streamed | Failure | None
#: A backend operation: yields steps, is sent what happened, returns the result.
Op = Generator[Step, Reply, _T]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


#: What ``Ops.request`` returns for a status listed in its ``fallback``.
MISSING: Any = _Missing()


def require_sse(content_type: str, what: str, where: Where) -> None:
    """Raise OrsProtocolError unless a 200 answer to ``/call`` is an SSE stream."""
    mime = content_type.partition(";")[0].strip().lower()
    if mime != "text/event-stream":
        raise OrsProtocolError(
            f"{what}: expected an SSE stream (text/event-stream), got {mime or 'none'!r}; "
            "check the URL points at an ORS server",
            **where.kw(),
        )


def _log(method: str, path: str, status: int, elapsed: float) -> None:
    shown = redact_url(path) if path.startswith(("http://", "https://")) else path
    logger.debug("%s %s -> %d in %.1f ms", method, shown, status, elapsed * 1000)


# -- operations: every backend method, written once ---------------------------------------


class Ops:
    """The ORS client protocol as sans-IO operations, shared by both HTTP backends.

    Each public method returns an ``Op`` generator; a transport drives it with
    ``send`` until ``StopIteration`` carries the result. State kept here (the
    server's environment names, whether it has ``/messages``) is per backend.
    ``clock`` is the transport's monotonic clock (seconds).
    """

    def __init__(self, settings: Settings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.clock = clock
        self.env_names: list[str] | None = None
        self.messages_missing = False

    @property
    def location(self) -> str:
        return self.settings.location

    def where(
        self, env_name: str | None = None, session_id: str | None = None, tool: str | None = None
    ) -> Where:
        return Where(self.settings.location, env_name, session_id, tool)

    def _budget(self, max_retries: int | None = None) -> RetryBudget:
        s = self.settings
        return RetryBudget(
            max_retries=s.max_retries if max_retries is None else max_retries,
            backoff=s.backoff,
            starting_ride_out=s.starting_ride_out,
            started=self.clock(),
        )

    # -- errors for requests that got no answer -------------------------------------------

    def transport_error(self, what: str, where: Where, failure: Failure) -> OrsConnectionError:
        s = self.settings
        if failure.kind == "connect_timeout":
            return OrsTimeoutError(
                f"cannot reach the ORS server at {s.location}: no connection within "
                f"connect_timeout={s.connect_timeout} s; is it running? raise "
                f"{s.owner}(connect_timeout=...) for a slow network",
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

    def timeout_error(self, what: str, where: Where, failure: Failure) -> OrsTimeoutError:
        s = self.settings
        return OrsTimeoutError(
            f"{what}: no answer from {s.location} within timeout={s.timeout} s "
            f"({failure.error_type}); raise {s.owner}(timeout=...) if the server is slow",
            **where.kw(),
        )

    def _check_deadline(self, deadline: float, what: str, where: Where) -> None:
        if self.clock() >= deadline:
            s = self.settings
            raise OrsTimeoutError(
                f"{what} did not finish within call_timeout={s.call_timeout} s; the tool may "
                f"still be running on the server. Raise {s.owner}(call_timeout=...) or pass "
                "None to wait as long as the server keeps the stream alive",
                **where.kw(),
            )

    # -- one request, retried ----------------------------------------------------------------

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
    ) -> Op[Any]:
        """One JSON request with retries; returns the decoded answer.

        Answers with a status in ``fallback`` return ``MISSING`` instead of raising.
        Every request used here is idempotent (``/create`` carries a client-made
        session id), so a dropped connection is retried like a refused one; a
        timeout is not (the server is slow, and asking again would not help).
        """
        s = self.settings
        headers = self.headers(where.session_id, secrets)
        content = None if body is None else encode_json(body, what=what)
        budget = self._budget(max_retries)
        limit = s.timeout if timeout is None else timeout
        target, hops = path, 0
        while True:
            hint: RetryHint | None = None
            check = _TotalTime(self, self.clock() + limit, limit, what, where)
            reply = yield Fetch(method, target, headers, content, timeout, what, where,
                                s.max_response_bytes, check)
            if isinstance(reply, Failure):
                if reply.kind in ("read_timeout", "timeout"):
                    raise self.timeout_error(what, where, reply)
                failure: OrsError = self.transport_error(what, where, reply)
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
                    status, error_detail(reply.body), what=what, where=where, session=session
                )
                hint = retry_hint(status, reply.headers)
                if hint is None:
                    raise failure
            delay = budget.next_delay(hint, self.clock())
            if delay is None:
                raise failure
            logger.debug("%s %s: retry %d in %.2f s (%s)", method, path, budget.attempts,
                         delay, failure.message)
            yield Sleep(delay)

    def stream(self, path: str, body: dict[str, Any], *, what: str, where: Where) -> Op[Any]:
        """POST a ``/call``-style request and reassemble its SSE answer, resuming drops.

        Once the server acknowledged the call (``task_id`` event), a dropped stream
        is re-POSTed with that id and the server replays or awaits the one run.
        Before that, the request is resent only if it surely never arrived
        (connection refused, 429, 503): otherwise the tool may have run.
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
                    reply.status, error_detail(reply.body), what=what, where=where, session=True
                )
                hint = retry_hint(reply.status, reply.headers)
                if hint is None:
                    raise failure
                safe = reply.status in SAFE_BEFORE_ACK
            else:
                assert isinstance(reply, Failure), reply
                if deadline is not None:
                    self._check_deadline(deadline, what, where)
                if reply.kind == "read_timeout":
                    failure = OrsConnectionError(
                        f"{what}: the stream went silent for {read_timeout:.0f} s although "
                        "the server pings every 10 s",
                        **where.kw(),
                    )
                else:
                    failure = self.transport_error(what, where, reply)
                safe = reply.not_sent
            if task_id is None and not safe:
                if hint is not None:
                    raise failure  # a 502/504 before the acknowledgement: it may have run
                raise OrsConnectionError(
                    f"{failure.message}; the server had not acknowledged the call, so "
                    "ors_gym cannot know whether the tool ran and does not resend it "
                    "(it could run twice); the episode's state is uncertain, call reset()",
                    **where.kw(),
                )
            delay = budget.next_delay(hint, self.clock())
            if delay is None:
                raise failure
            if deadline is not None:
                delay = min(delay, max(deadline - self.clock(), 0.0))
            logger.debug("POST %s: %s; %s in %.2f s", path, failure.message,
                         "resuming" if task_id else "retrying", delay)
            yield Sleep(delay)

    def headers(
        self, session_id: str | None, secrets: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """Every header of a request: the user's, auth, API key, session id, secrets."""
        s = self.settings
        return build_headers(api_key=s.api_key, session_id=session_id, secrets=secrets,
                             extra=dict(s.headers), basic_auth=s.basic_auth)

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
        if _origin(url) != _origin(base):
            extra = {name.lower() for name, _ in self.settings.headers}
            dropped = _CREDENTIALS | extra
            logger.debug("%s: redirected to another origin (%s); credentials not sent there",
                         what, redact_url(url))
            return url, {k: v for k, v in headers.items() if k.lower() not in dropped}
        if url == base or url.startswith(base + "/"):
            return url[len(base):] or "/", headers
        return url, headers

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

    # -- discovery ---------------------------------------------------------------------------

    def _get(self, path: str) -> Op[Any]:
        return self.request("GET", path, what=f"GET {path}", where=self.where())

    def health(self) -> Op[dict[str, Any]]:
        """``/health``: ``{"status": "ok"}`` when the server is up."""
        answer = yield from self._get("/health")
        return dict(parse(dict[str, Any], answer, what="/health answer", where=self.location))

    def version(self) -> Op[dict[str, Any]]:
        """``/version``: the server SDK's ``version`` and ``build_sha``."""
        answer = yield from self._get("/version")
        return dict(parse(dict[str, Any], answer, what="/version answer", where=self.location))

    def list_environments(self) -> Op[list[str]]:
        """Environment names, lower-cased; the first is the default. Cached."""
        names = self.env_names
        if names is None:
            answer = yield from self._get("/list_environments")
            names = parse(list[str], answer, what="/list_environments answer",
                          where=self.location)
            names = self.env_names = [name.lower() for name in names]
        return list(names)

    def env(self, env_name: str) -> Op[str]:
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
        names = self.env_names
        if names is not None and key in names:  # the hot path: nothing to ask
            return key
        names = yield from self.list_environments()
        if key in names:
            return key
        self.env_names = None  # the server may have restarted with other environments
        names = yield from self.list_environments()
        if key in names:
            return key
        err = OrsRequestError(
            f"unknown environment {env_name!r}; this server has: {', '.join(names) or '(none)'}",
            server=self.location,
            env_name=env_name,
        )
        err.status_code = 404
        raise err

    def tools(self, env_name: str) -> Op[ListToolsOutput]:
        """The environment's shared tools and its terminal tool."""
        env = yield from self.env(env_name)
        answer = yield from self.request("GET", f"/{env}/tools", what=f"GET /{env}/tools",
                                         where=self.where(env))
        return parse(ListToolsOutput, answer, what=f"/{env}/tools answer", where=self.location)

    def splits(self, env_name: str) -> Op[list[Split]]:
        """The task splits, in the server's order."""
        env = yield from self.env(env_name)
        answer = yield from self.request("GET", f"/{env}/splits", what=f"GET /{env}/splits",
                                         where=self.where(env))
        return parse(list[Split], answer, what=f"/{env}/splits answer", where=self.location)

    def _post_field(self, env: str, endpoint: str, body: dict[str, Any], key: str) -> Op[Any]:
        what = f"POST /{env}/{endpoint}"
        answer = yield from self.request("POST", f"/{env}/{endpoint}", what=what,
                                         where=self.where(env), body=body)
        if not isinstance(answer, dict) or key not in answer:
            raise OrsProtocolError(
                f"malformed {what} answer: no {key!r} field", server=self.location, env_name=env
            )
        return answer[key]

    def tasks(self, env_name: str, split: str) -> Op[list[dict[str, Any]]]:
        """Every task of ``split``; raises OrsRequestError for index-only environments."""
        env = yield from self.env(env_name)
        tasks = yield from self._post_field(env, "tasks", {"split": split}, "tasks")
        return parse(list[dict[str, Any]], tasks, what=f"/{env}/tasks answer",
                     where=self.location)

    def num_tasks(self, env_name: str, split: str) -> Op[int]:
        """How many tasks ``split`` has."""
        env = yield from self.env(env_name)
        count = yield from self._post_field(env, "num_tasks", {"split": split}, "num_tasks")
        return int(parse(int, count, what=f"/{env}/num_tasks answer", where=self.location))

    def task(self, env_name: str, split: str, index: int) -> Op[dict[str, Any]]:
        """Task ``index`` of ``split`` (negative counts from the end)."""
        env = yield from self.env(env_name)
        task = yield from self._post_field(env, "task", {"split": split, "index": index}, "task")
        return dict(parse(dict[str, Any], task, what=f"/{env}/task answer", where=self.location))

    def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> Op[list[dict[str, Any]]]:
        """Tasks ``start:stop`` of ``split``, with Python slice rules."""
        env = yield from self.env(env_name)
        body = {"split": split, "start": start, "stop": stop}
        tasks = yield from self._post_field(env, "task_range", body, "tasks")
        return parse(list[dict[str, Any]], tasks, what=f"/{env}/task_range answer",
                     where=self.location)

    # -- sessions ----------------------------------------------------------------------------

    def create_session(
        self,
        env_name: str,
        *,
        task_spec: Mapping[str, Any] | None = None,
        split: str | None = None,
        index: int | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> Op[str]:
        """Open a session for a task; returns its id (a uuid4 made here, which the
        protocol allows, saving the ``/create_session`` round trip)."""
        check_task_source(task_spec, split, index)
        env = yield from self.env(env_name)
        sid = str(uuid.uuid4())
        body: dict[str, Any] = {"env_name": env}
        if task_spec is not None:
            body["task_spec"] = dict(task_spec)
        else:
            body.update(split=split, index=index)
        try:
            yield from self.request("POST", "/create", what=f"create a {env} session",
                                    where=self.where(env, sid), body=body, secrets=secrets)
        except OrsRequestError as exc:
            # Only a resent /create whose first attempt got through meets our own uuid4.
            if exc.status_code != 400 or "already exists" not in exc.message:
                raise
        return sid

    def _session_get(self, env: str, endpoint: str, session_id: str) -> Op[Any]:
        return self.request("GET", f"/{env}/{endpoint}", what=f"GET /{env}/{endpoint}",
                            where=self.where(env, session_id), session=True)

    def prompt(self, env_name: str, session_id: str) -> Op[list[Block]]:
        """The first observation, as blocks."""
        env = yield from self.env(env_name)
        answer = yield from self._session_get(env, "prompt", session_id)
        return parse(list[Block], answer, what=f"/{env}/prompt answer", where=self.location)

    def messages(self, env_name: str, session_id: str) -> Op[list[Message]]:
        """The prompt as a role-tagged conversation (``/prompt`` wrapped on old servers)."""
        env = yield from self.env(env_name)
        if not self.messages_missing:
            answer = yield from self.request(
                "GET", f"/{env}/messages", what=f"GET /{env}/messages",
                where=self.where(env, session_id), session=True,
                fallback=frozenset({404, 405}),
            )
            if answer is not MISSING:
                return parse(list[Message], answer, what=f"/{env}/messages answer",
                             where=self.location)
        blocks = yield from self.prompt(env, session_id)  # OrsSessionExpired if that was the 404
        if not self.messages_missing:
            logger.debug("%s has no /messages; using /prompt from now on", self.location)
            self.messages_missing = True
        return [Message(role="user", blocks=list(blocks))]

    def task_tools(self, env_name: str, session_id: str) -> Op[ListToolsOutput]:
        """Shared tools plus this task's own tools."""
        env = yield from self.env(env_name)
        answer = yield from self._session_get(env, "task_tools", session_id)
        return parse(ListToolsOutput, answer, what=f"/{env}/task_tools answer",
                     where=self.location)

    def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> Op[CallResult]:
        """One tool call; agent mistakes are ``RunToolError``, a raising tool OrsToolError."""
        env = yield from self.env(env_name)
        answer = yield from self.stream(
            f"/{env}/call",
            {"name": name, "input": dict(arguments)},
            what=f"tool call {name!r}",
            where=self.where(env, session_id, name),
        )
        return parse(CallResult, answer, what=f"/{env}/call result", where=self.location)

    def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> Op[list[GroupScore]]:
        """Score candidate transcripts, index-aligned."""
        env = yield from self.env(env_name)
        answer = yield from self.stream(
            f"/{env}/score_group",
            {"candidates": [dict(c) for c in candidates]},
            what="score_group",
            where=self.where(env, session_id),
        )
        if not isinstance(answer, dict) or "scores" not in answer:
            raise OrsProtocolError("malformed /score_group result: no 'scores' field",
                                   server=self.location, env_name=env, session_id=session_id)
        return parse(list[GroupScore], answer["scores"], what="/score_group result",
                     where=self.location)

    def delete(
        self, session_id: str, *, max_retries: int | None = None, timeout: float | None = None
    ) -> Op[None]:
        """End the session; a session (or server) already gone is not an error."""
        try:
            yield from self.request("POST", "/delete", what="delete the session",
                                    where=self.where(session_id=session_id), session=True,
                                    max_retries=max_retries, timeout=timeout)
        except (OrsSessionExpired, OrsConnectionError) as exc:
            logger.debug("delete of session %s skipped: %s", session_id, exc.message)

    def ping(
        self, session_id: str, *, max_retries: int | None = None, timeout: float | None = None
    ) -> Op[None]:
        """Keep the session alive; raises OrsSessionExpired once it is gone."""
        yield from self.request("POST", "/ping", what="ping the session",
                                where=self.where(session_id=session_id), session=True,
                                max_retries=max_retries, timeout=timeout)


class _TotalTime:
    """The check a ``BodyReader`` runs after each piece: the request's time is up."""

    __slots__ = ("deadline", "limit", "ops", "what", "where")

    def __init__(self, ops: Ops, deadline: float, limit: float, what: str, where: Where) -> None:
        self.ops = ops
        self.deadline = deadline
        self.limit = limit
        self.what = what
        self.where = where

    def __call__(self) -> None:
        if self.ops.clock() >= self.deadline:
            s = self.ops.settings
            raise OrsTimeoutError(
                f"{self.what}: the answer from {s.location} was still arriving after "
                f"timeout={self.limit} s; raise {s.owner}(timeout=...) if the server is slow",
                **self.where.kw(),
            )


class _Deadline:
    """The ``call_timeout`` check a ``StreamAssembler`` runs after each event."""

    __slots__ = ("deadline", "ops", "what", "where")

    def __init__(self, ops: Ops, deadline: float, what: str, where: Where) -> None:
        self.ops = ops
        self.deadline = deadline
        self.what = what
        self.where = where

    def __call__(self) -> None:
        self.ops._check_deadline(self.deadline, self.what, self.where)
