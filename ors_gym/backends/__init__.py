"""Backends move ORS messages: over HTTP, or to SDK environments in this process."""

from ors_gym.backends.base import Backend

__all__ = ["Backend"]
