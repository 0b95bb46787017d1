"""How an HTTP backend is configured: where the server is, how patient to be.

``Settings`` is made once per backend and shared, read-only, by the sans-IO
operations and both drivers. The URL helpers keep credentials out of every
URL that is shown: user-info becomes a basic-auth header instead.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from ors_gym.errors import redact_url

__all__ = ["Settings", "Where", "configure", "origin", "split_base_url", "url_of"]


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


@dataclass(frozen=True)
class Settings:
    """What the operations and both drivers share: the server and how patient to be.

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


def split_base_url(base_url: str, owner: str = "HttpBackend") -> tuple[str, str | None]:
    """``base_url`` without user-info and trailing slash, and that user-info as a
    basic ``Authorization`` value (as httpx would send it), so no logged URL carries it."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(
            f"{owner} base_url must be an http(s) URL such as 'http://127.0.0.1:8080', "
            f"got {redact_url(str(base_url))!r}"
        )
    parts = urlsplit(base_url)
    basic_auth = None
    if parts.username or parts.password:
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        basic_auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return (redact_url(base_url) or base_url).rstrip("/"), basic_auth


def configure(
    owner: str,
    base_url: str,
    *,
    keepalive_interval: float | None,
    headers: Mapping[str, str] | None,
    **options: Any,
) -> Settings:
    """The ``Settings`` of a backend made as ``owner(base_url, ...)``; checks every option."""
    location, basic_auth = split_base_url(base_url, owner)
    if keepalive_interval is not None and keepalive_interval <= 0:
        raise ValueError(
            f"keepalive_interval must be positive or None (off), got {keepalive_interval}"
        )
    return Settings(location=location, owner=owner, basic_auth=basic_auth,
                    headers=tuple((headers or {}).items()), **options)


def url_of(location: str, path: str) -> str:
    """The absolute URL of a step's ``path`` (a path under ``location``, or a whole URL)."""
    return path if path.startswith(("http://", "https://")) else location + path


def origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port: what decides whether credentials may follow a redirect."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port
