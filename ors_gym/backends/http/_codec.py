"""Bytes in and out of an ORS request: headers, JSON bodies, answer bodies, statuses.

Requests carry JSON made by ``ors_gym._json``; answers are undone from gzip or
deflate as their bytes arrive, within ``max_response_bytes`` (so a small
compressed "zip bomb" is refused having used about the cap in memory), then
parsed as JSON. A status that is not 2xx becomes the ``OrsError`` that
``errors.error_for_status`` picks, with a message saying what to do.
"""

from __future__ import annotations

import base64
import html
import json
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import httpx

from ors_gym import _json
from ors_gym.backends.base import Secrets, secret_values
from ors_gym.backends.http._settings import API_KEY_VAR, WELL_KNOWN_SECRETS, Where
from ors_gym.errors import OrsError, OrsProtocolError, error_for_status

__all__ = [
    "ACCEPT_ENCODING",
    "USER_AGENT",
    "BodyDecoder",
    "BodyReader",
    "Where",
    "allowed_domains",
    "build_headers",
    "decode_json",
    "encode_json",
    "error_detail",
    "header_map",
    "mask",
    "require_sse",
    "secrets_header",
    "status_error",
    "too_big",
]

#: Content encodings ``BodyDecoder`` undoes (and so the only ones asked for).
ACCEPT_ENCODING = "gzip, deflate"
#: Longest server detail quoted in an error (an SDK 500 may carry a traceback).
_DETAIL_LIMIT = 2000


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ors-gym")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0"


#: Who is asking, on every request (as the SDK's client names itself and httpx): front
#: doors such as CDNs refuse requests that carry none.
USER_AGENT = f"ors-gym/{_version()} python-httpx/{httpx.__version__}"
#: Words in a 401/403 answer that put the blame on the API key (``***``: the answer
#: echoed the key, masked by ``error_detail``).
_KEY_WORDS = re.compile(r"\bkeys?\b|api[ _-]?key|credential|token|unauthori[sz]ed|"
                        r"authenticat|\*\*\*", re.IGNORECASE)


# -- requests ----------------------------------------------------------------------------


def secrets_header(
    secrets: Secrets,
    scoped: Mapping[str, tuple[str, list[str]]] | None = None, *, hosted: bool = False,
) -> str:
    """The ``X-Secrets`` value, as the SDK's client builds it: standard base64 of
    ``{"KEY": {"value": "...", "allowed_domains": [...]}}``, the domains the platform's
    egress proxy lets the value reach (see ``allowed_domains``). ``scoped`` secrets
    (the key's own) come first; the user's win on a clash."""
    payload: dict[str, dict[str, Any]] = {
        key: {"value": value, "allowed_domains": list(domains)}
        for key, (value, domains) in (scoped or {}).items()
    }
    values = secret_values(secrets)
    for key, value in values.items():
        domains = allowed_domains(key, secrets[key], hosted=hosted)
        payload[key] = {"value": value} if domains is None else {
            "value": value, "allowed_domains": domains}
    return base64.b64encode(json.dumps(payload).encode("utf-8")).decode("ascii")


def allowed_domains(
    key: str, entry: str | tuple[str, Sequence[str]], *, hosted: bool
) -> list[str] | None:
    """The domains secret ``key`` may be sent to: those given with it (``(value,
    domains)``), else those the SDK's client knows for a well-known name
    (``OPENAI_API_KEY`` -> ``api.openai.com``...). A plain value under another name is
    refused for a hosted deployment, as the SDK's client refuses it (the platform's
    proxy would otherwise not know where it may go); a plain server gets it alone
    (None), as before."""
    if isinstance(entry, tuple | list):
        return [str(d) for d in entry[1]]
    known = WELL_KNOWN_SECRETS.get(key)
    if known is not None:
        return list(known)
    if not hosted:
        return None
    raise ValueError(
        f"secret {key!r} is not a name whose domains the platform knows (the SDK's "
        "WELL_KNOWN_SECRETS, e.g. OPENAI_API_KEY, ANTHROPIC_API_KEY, HF_TOKEN); pass it "
        f"as secrets={{{key!r}: (value, ['api.example.com'])}} naming the domains the "
        "environment may send it to"
    )


def build_headers(
    *,
    api_key: str | None,
    session_id: str | None = None,
    secrets: Secrets | None = None,
    extra: Mapping[str, str] | None = None,
    basic_auth: str | None = None,
    deployment: str | None = None,
    scoped: Mapping[str, tuple[str, list[str]]] | None = None,
) -> dict[str, str]:
    """Per-request headers: ``User-Agent`` and ``Accept`` (the user's ``extra`` ones may
    replace them), basic auth, API key, deployment, session id, secrets (the only place
    they travel)."""
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **(extra or {})}
    headers["Content-Type"] = "application/json"
    headers["Accept-Encoding"] = ACCEPT_ENCODING
    if basic_auth:
        headers["Authorization"] = basic_auth
    if api_key:
        headers["X-API-Key"] = api_key
    if deployment:
        headers["X-Deployment"] = deployment
    if session_id:
        headers["X-Session-ID"] = session_id
    if secrets or scoped:
        headers["X-Secrets"] = secrets_header(secrets or {}, scoped,
                                              hosted=deployment is not None)
    return headers


def encode_json(payload: Any, *, what: str) -> bytes:
    """``payload`` as JSON bytes; numpy values become plain numbers and lists."""
    try:
        return _json.dumps(payload)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"the body of {what} cannot be sent as JSON: {exc}. "
            "Pass only dicts, lists, str, int, float, bool and None."
        ) from None


# -- answers -----------------------------------------------------------------------------


def error_detail(body: bytes, hide: Iterable[str | None] = ()) -> str:
    """The server's explanation of an error answer: FastAPI's ``detail``, else the text.

    The values in ``hide`` (the API key, secrets, ``env_overrides``) are masked
    wherever the server echoed them, as sent or JSON-escaped (a 422 that quotes its
    input); values shorter than 4 characters are not, or every such run of the text
    would be masked.
    """
    text = mask(body.decode("utf-8", "replace").strip(), hide)
    page = _html_page(text)
    if page is not None:
        return page
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


def mask(text: str, hide: Iterable[str | None]) -> str:
    """``text`` with each value of ``hide`` of 4 characters or more replaced by ``***``,
    as written or JSON-escaped (an answer that quotes it)."""
    for value in sorted({v for v in hide if v and len(v) >= 4}, key=len, reverse=True):
        for form in {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}:
            text = text.replace(form, "***")
    return text


def _html_page(text: str) -> str | None:
    """An HTML error page (a gateway's, a CDN's) told by its title or first heading."""
    if not text[:200].lstrip().lower().startswith(("<!doctype html", "<html", "<head", "<body")):
        return None
    found = re.search(r"<title[^>]*>(.*?)</title>|<h1[^>]*>(.*?)</h1>", text, re.I | re.S)
    title = "" if found is None else html.unescape(re.sub(
        r"<[^>]+>|\s+", " ", found.group(1) or found.group(2) or "")).strip()
    return f"an HTML page titled {title!r}" if title else "an HTML page"


def status_error(
    status: int, detail: str, *, what: str, where: Where, session: bool = False,
    platform_api: bool = False,
) -> OrsError:
    """The error for a non-2xx answer that is not retried (or whose retries ran out).

    ``session`` marks endpoints that act on a session: there a 404/410 means the
    session is gone, except a 404 saying the environment does not implement the
    endpoint (``/score_group``). ``platform_api``: the answer is the OpenReward
    platform API's own (no environment ran), and a 5xx says so.
    """
    gone = (session and status in (404, 410) and "not implement" not in detail
            and "deployment not found" not in detail.lower())
    if gone:
        message = (
            f"session {where.session_id} is gone on the server (deleted, reaped after 15 "
            "idle minutes, or the server restarted); call reset() to start a new episode "
            f"(server said {status}: {detail})"
        )
    elif status in (401, 403) and _KEY_WORDS.search(detail):
        message = (
            f"{what} was refused ({status}: {detail}): the API key is missing or was not "
            f"accepted; set {API_KEY_VAR} (or pass api_key=...) to a valid key "
            "(sent as X-API-Key)"
        )
    elif status in (401, 403):
        message = (
            f"{what} was refused ({status}): {detail}; the answer does not blame the API key "
            "(a front door such as a CDN or a proxy may have refused the request itself)"
        )
    elif status == 402:
        message = (
            f"{what} was refused (402 Payment Required: {detail}): the OpenReward account "
            "of this API key has no credits left; add credits to it on OpenReward (or use "
            "another key), then try again"
        )
    elif status == 404 and "deployment not found" in detail.lower():
        message = (
            f"{what} was refused (404: {detail}): no such deployment; deployment names are "
            "'Namespace/name' and case-sensitive, check it on OpenReward"
        )
    elif 400 <= status < 500:
        message = f"{what} was refused ({status}): {detail}"
    elif platform_api:
        message = (
            f"{what} failed on the OpenReward platform's API ({status}): {detail}; the "
            "platform itself failed (no environment was involved)"
            + ("; retries ran out" if status in (502, 503, 504) else
               "; try again later, and report it to OpenReward if it persists")
        )
    else:
        if status == 500:
            hint = (
                "this is a bug or a failed setup() in the environment; running it again "
                "gives the same answer, so ors_gym does not retry"
            )
        elif status == 503:
            hint = "the server is overloaded or still starting; retries ran out"
        else:
            hint = "the server or a gateway in front of it failed"
        message = f"{what} failed on the server ({status}): {detail}; {hint}"
    err = error_for_status(status, message, server=where.server, env_name=where.env_name,
                           session_id=where.session_id if gone else None, tool=where.tool)
    return err.with_context(session_id=where.session_id)


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


def header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Headers by lower-cased name, repeated ones joined with ", " (as ``httpx.Headers.get``):
    read once into a dict, where each ``httpx.Headers.get`` scans and decodes them all."""
    out: dict[str, str] = {}
    for key, value in raw:
        name = key.decode("latin-1").lower()
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            text = value.decode("latin-1")
        out[name] = f"{out[name]}, {text}" if name in out else text
    return out


def require_sse(content_type: str, what: str, where: Where) -> None:
    """Raise OrsProtocolError unless a 200 answer to ``/call`` is an SSE stream."""
    mime = content_type.partition(";")[0].strip().lower()
    if mime != "text/event-stream":
        raise OrsProtocolError(
            f"{what}: expected an SSE stream (text/event-stream), got {mime or 'none'!r}; "
            "check the URL points at an ORS server",
            **where.kw(),
        )


def _preview(body: bytes, limit: int = 80) -> str:
    text = body[: limit + 1].decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


# -- answer bodies: content decoding within the size cap -----------------------------------


def too_big(what: str, max_bytes: int, where: Where) -> OrsProtocolError:
    """The error for an answer past ``max_response_bytes``."""
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
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise OrsProtocolError(
                f"{what}: the answer is encoded as {content_encoding!r}, which ors_gym did not "
                f"ask for (it accepts {ACCEPT_ENCODING})",
                **where.kw(),
            )
        self.coding = codings[0] if codings else None
        self._z: Any = None
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
                raise too_big(self.what, self.max_bytes, self.where)
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
                raise too_big(self.what, self.max_bytes, self.where)
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
        """Take raw bytes of the answer."""
        self._body += self._decoder.feed(raw)
        if self._check is not None:
            self._check()

    def value(self) -> bytes:
        """The decoded body so far."""
        return bytes(self._body)
