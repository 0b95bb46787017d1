"""Typed errors: one base, one child per failure a caller may handle differently.

Every message says what happened, where (server, environment, session, tool)
and what to do. Secrets never reach a message: only the fields below are
formatted, and the server URL is stripped of any user-info before it is shown.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "OrsActionError",
    "OrsAuthError",
    "OrsConnectionError",
    "OrsDependencyError",
    "OrsError",
    "OrsHTTPError",
    "OrsPaymentError",
    "OrsProtocolError",
    "OrsRequestError",
    "OrsServerError",
    "OrsSessionExpired",
    "OrsTimeoutError",
    "OrsToolError",
    "error_for_status",
]


def redact_url(url: str | None) -> str | None:
    """``url`` without user-info or query string, safe to show in messages and logs."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class OrsError(Exception):
    """Base of every ors_gym error.

    ``server``, ``env_name``, ``session_id`` and ``tool`` say where it happened;
    they are appended to the message so a log line alone identifies the call.
    """

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        env_name: str | None = None,
        session_id: str | None = None,
        tool: str | None = None,
    ) -> None:
        self.message = message
        self.server = redact_url(server)
        self.env_name = env_name
        self.session_id = session_id
        self.tool = tool
        super().__init__(message)

    def with_context(
        self,
        *,
        server: str | None = None,
        env_name: str | None = None,
        session_id: str | None = None,
        tool: str | None = None,
    ) -> OrsError:
        """Fill in context fields that are still unset; returns self for ``raise``."""
        self.server = self.server or redact_url(server)
        self.env_name = self.env_name or env_name
        self.session_id = self.session_id or session_id
        self.tool = self.tool or tool
        return self

    def __str__(self) -> str:
        where = [
            f"{key}={value}"
            for key, value in (
                ("server", self.server),
                ("env", self.env_name),
                ("session", self.session_id),
                ("tool", self.tool),
            )
            if value
        ]
        return f"{self.message} [{', '.join(where)}]" if where else self.message

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the context across pickling (AsyncVectorEnv workers send errors back).
        return (
            _rebuild,
            (type(self), self.message, self.server, self.env_name, self.session_id, self.tool),
        )


def _rebuild(
    cls: type[OrsError],
    message: str,
    server: str | None,
    env_name: str | None,
    session_id: str | None,
    tool: str | None,
) -> OrsError:
    err = cls.__new__(cls)
    OrsError.__init__(
        err, message, server=server, env_name=env_name, session_id=session_id, tool=tool
    )
    return err


class OrsConnectionError(OrsError):
    """The server could not be reached, or the connection dropped and retries ran out."""


class OrsTimeoutError(OrsConnectionError):
    """A request or tool call took longer than the configured timeout."""


class OrsHTTPError(OrsError):
    """The server answered with an unexpected HTTP status; ``status_code`` holds it."""

    status_code: int | None = None


class OrsRequestError(OrsHTTPError):
    """The server refused the request itself (unknown environment, split, index; 4xx)."""


class OrsAuthError(OrsRequestError):
    """The server (a hosted gateway) refused the API key, or none was sent (401/403).

    Never retried: the same key gets the same answer. Set ``OPENREWARD_API_KEY``
    or pass ``api_key=``.
    """


class OrsPaymentError(OrsRequestError):
    """The platform refused the request because the API key's account has no credits
    left (402 Payment Required); nothing is retried until credits are added."""


class OrsServerError(OrsHTTPError):
    """The server failed (5xx): a bug or a failed ``setup()`` in the environment."""


class OrsSessionExpired(OrsError):
    """The session is gone on the server (deleted, reaped after idling, or restarted)."""


class OrsToolError(OrsError):
    """The tool's own code raised on the server (an SSE ``error`` event)."""


class OrsProtocolError(OrsError):
    """The server's answer does not fit the ORS wire format."""


class OrsActionError(OrsError, ValueError):
    """An action is not a valid ors_gym action (see ``ors_gym.actions``)."""


class OrsDependencyError(OrsError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


def error_for_status(
    status: int,
    message: str,
    *,
    server: str | None,
    env_name: str | None = None,
    session_id: str | None = None,
    tool: str | None = None,
) -> OrsError:
    """The error for an HTTP status an ORS server answered (or would have answered).

    A 404 or 410 on a session (``session_id`` given) means the session is gone:
    ``OrsSessionExpired``. A 401 or 403 is ``OrsAuthError``, a 402
    ``OrsPaymentError``. Any other 4xx is
    ``OrsRequestError``, and every other
    status (5xx, or one no ORS server sends) ``OrsServerError``; both carry the
    status as ``status_code``. ``message`` is used as given.
    """
    where = {"server": server, "env_name": env_name, "session_id": session_id, "tool": tool}
    if status in (404, 410) and session_id is not None:
        return OrsSessionExpired(message, **where)
    cls: type[OrsHTTPError]
    if status in (401, 403):
        cls = OrsAuthError
    elif status == 402:
        cls = OrsPaymentError
    else:
        cls = OrsRequestError if 400 <= status < 500 else OrsServerError
    err = cls(message, **where)
    err.status_code = status
    return err
