"""A refused model request, written in the wire's own error shape and status.

OpenAI answers ``{"error": {"message", "type", "param", "code"}}``, Anthropic
``{"type": "error", "error": {"type", "message"}}``; each SDK reads its own shape
into its own exception class, so an agent sees the refusal as it would from the
real service. A refused request never changes a session's trajectory.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["GatewayError", "Wire", "error_body"]

Wire = Literal["openai", "anthropic"]

#: Anthropic's error type for each status the gateway answers.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
}
#: OpenAI's error type for each status (its 4xx are nearly all ``invalid_request_error``).
_OPENAI_TYPES = {401: "authentication_error", 404: "invalid_request_error",
                 502: "api_error", 503: "api_error"}


class GatewayError(Exception):
    """A request the gateway refuses: ``status``, a message saying what was wrong and how
    to fix it, and OpenAI's ``code`` and ``param`` where the wire has them."""

    def __init__(
        self, status: int, message: str, *, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


def error_body(error: GatewayError, wire: Wire) -> dict[str, Any]:
    """The JSON body ``wire``'s clients expect for ``error``."""
    if wire == "anthropic":
        kind = _ANTHROPIC_TYPES.get(error.status, "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": error.message}}
    kind = _OPENAI_TYPES.get(error.status, "invalid_request_error")
    return {"error": {"message": error.message, "type": kind, "param": error.param,
                      "code": error.code}}
