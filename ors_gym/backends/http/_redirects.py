"""Where a redirect may lead, and which headers may follow it.

Redirects within the server keep every header; one to another origin drops
the credentials (API key, secrets, auth, the user's headers), so they reach
only the server they were meant for. A hosted deployment answers its bare
paths with a permanent redirect to its default environment
(``/prompt`` -> ``/echo/prompt``); once seen, later requests go there at once.
"""

from __future__ import annotations

import logging
from urllib.parse import urljoin

from ors_gym.backends.http._settings import Settings, Where, origin, url_of
from ors_gym.backends.http._steps import Answer
from ors_gym.errors import OrsProtocolError, redact_url

__all__ = ["MAX_REDIRECTS", "REDIRECTS", "Redirects"]

#: Redirect statuses followed (the SDK answers 308 for an unknown environment path).
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
#: Headers that never follow a redirect to another origin (credentials, secrets).
_CREDENTIALS = frozenset({"authorization", "x-api-key", "x-secrets", "cookie"})

logger = logging.getLogger("ors_gym.http")


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
