"""In-process backends: SDK ``Environment`` classes served in this process, no server.

``AsyncLocalBackend`` awaits the SDK's own dispatch on the caller's event loop;
``LocalBackend`` is its blocking face on a private loop.
"""

from ors_gym.backends.local.async_ import AsyncLocalBackend
from ors_gym.backends.local.sync import LocalBackend

__all__ = ["AsyncLocalBackend", "LocalBackend"]
