"""``LocalBackend``: the blocking face of ``AsyncLocalBackend`` (see ``backends._face``).

A tool call that never waits costs one loop pass and no thread hop beyond the
SDK's own ``asyncio.to_thread`` for sync tools; async background work an
environment spawns goes on between calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from ors_gym.backends._face import BlockingFace
from ors_gym.backends.local.async_ import AsyncLocalBackend, EnvSpec

__all__ = ["LocalBackend"]


class LocalBackend(BlockingFace[AsyncLocalBackend]):
    """SDK ``Environment`` classes served in this process, blocking; see ``AsyncLocalBackend``.

    ``environments`` is one class or ``"module:Class"`` string, or a sequence
    of them; the first is the default. Needs the ``local`` extra
    (``pip install 'ors-gym[local]'``).
    """

    _runtime_name = "ors-local"

    def __init__(self, environments: EnvSpec | Sequence[EnvSpec]) -> None:
        super().__init__(AsyncLocalBackend(environments))

    def environment_class(self, env_name: str) -> type:
        """The SDK class served as ``env_name``."""
        return self.core.environment_class(env_name)

    def close(self) -> None:
        """Tear down every open session and close the event loop; safe to call twice.

        The backend stays usable: the next call makes a new loop.
        """
        self.runtime.close(self.core.aclose() if self.core.open_sessions else None)
