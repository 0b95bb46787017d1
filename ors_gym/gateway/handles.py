"""Opaque handles for a sampled turn's reasoning: Responses' ``encrypted_content`` and
Messages' thinking ``signature``.

A harness echoes its history back every turn; a handle lets the reasoning it carried
come back with it without the client ever holding the text in clear. A handle is the
text encrypted and authenticated (Fernet) under a key this process draws at import, so
only the gateway that issued it reads it back; any other string reads as no reasoning
(an echo without its reasoning still continues the row: reasoning is never compared).
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken

__all__ = ["seal", "unseal"]

_PREFIX = "orsg1."
_FERNET = Fernet(Fernet.generate_key())


def seal(text: str) -> str:
    """``text`` as an opaque handle only this process can read back."""
    return _PREFIX + _FERNET.encrypt(text.encode()).decode()


def unseal(handle: object) -> str | None:
    """The text a handle of :func:`seal` holds; None for anything else."""
    if not isinstance(handle, str) or not handle.startswith(_PREFIX):
        return None
    try:
        return _FERNET.decrypt(handle[len(_PREFIX):].encode()).decode()
    except (InvalidToken, ValueError):
        return None
