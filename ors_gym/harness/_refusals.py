"""Which capture sessions the gateway refused a turn for a full context.

The gateway answers a prompt at or over the model's context length with a 400
(``context_length_exceeded``) and records nothing; the runner needs to know it
happened to name the stop reason. :func:`watch` wraps the gateway's ``turn`` on the
instance once (the gateway has no record of its refusals) and keeps the session ids
refused that way.
"""

from __future__ import annotations

from typing import Any

__all__ = ["watch"]


class _Watch:
    def __init__(self, turn: Any) -> None:
        self.turn = turn
        self.full: set[str] = set()

    async def __call__(self, session: Any, request: Any) -> Any:
        from ors_gym.gateway import GatewayError

        try:
            return await self.turn(session, request)
        except GatewayError as exc:
            if exc.code == "context_length_exceeded":
                self.full.add(session.id)
            raise


def watch(gateway: Any) -> set[str]:
    """The set of session ids refused for a full context, filled from now on (empty for
    a gateway reached over HTTP, whose refusals are not seen here)."""
    if not hasattr(gateway, "turn"):
        return set()
    current = gateway.__dict__.get("turn")
    if isinstance(current, _Watch):
        return current.full
    wrapped = _Watch(gateway.turn)
    gateway.turn = wrapped
    return wrapped.full
