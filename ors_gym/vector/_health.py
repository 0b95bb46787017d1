"""Which of a vector env's servers answer, so a dead one ends only its own sub-envs.

After a connection failure ``OrsVectorEnv`` asks ``ServerHealth.check``: one
``/health`` probe per server at a time, shared by every sub-env asking
meanwhile. A server whose probe fails is noted down; its sub-envs then report
``server_unreachable`` truncations (``unreachable``) instead of retrying, until
a probe answers again. Only when every server is down does ``check`` raise.

A server that fails its probe is not probed again at once: the next probe
waits ``PROBE_BACKOFF_S`` seconds, doubled after each further failure up to
``PROBE_BACKOFF_MAX_S`` (meanwhile the last failure stands), so a server that
hangs costs a batch its probe's timeout only now and then, not every batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from ors_gym.backends.base import AsyncBackend
from ors_gym.errors import OrsConnectionError, OrsError
from ors_gym.observations import empty_observation
from ors_gym.vector._results import Outcome

__all__ = ["PROBE_BACKOFF_MAX_S", "PROBE_BACKOFF_S", "ServerHealth"]

logger = logging.getLogger("ors_gym")

#: Seconds after a failed probe before a server is probed again (doubled per failure).
PROBE_BACKOFF_S = 1.0
#: The longest wait between probes of a server that keeps failing them.
PROBE_BACKOFF_MAX_S = 30.0


class ServerHealth:
    """The servers noted down, and the probes that decide it (on the vector env's loop)."""

    def __init__(self, servers: Sequence[AsyncBackend],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.servers = servers
        self.down: set[AsyncBackend] = set()  # servers whose last /health probe failed
        self._probes: dict[AsyncBackend, asyncio.Task[OrsError | None]] = {}
        self._clock = clock
        #: Per server noted down: (its last probe's error, when to probe again, the wait).
        self._backoff: dict[AsyncBackend, tuple[OrsError, float, float]] = {}

    def tasks(self) -> list[asyncio.Task[OrsError | None]]:
        """The probes started so far (for shutdown to cancel)."""
        return list(self._probes.values())

    async def probe(self, server: AsyncBackend) -> OrsError | None:
        """One ``/health`` probe of ``server`` shared by every caller meanwhile; the error
        if it failed. Keeps ``down`` up to date. While the server backs off after a
        failed probe, that failure is returned without probing."""
        task = self._probes.get(server)
        backoff = self._backoff.get(server)
        if (task is None or task.done()) and backoff is not None and self._clock() < backoff[1]:
            return backoff[0]
        if task is None or task.done():
            task = self._probes[server] = asyncio.get_running_loop().create_task(
                self._probe(server)
            )
        return await asyncio.shield(task)

    async def _probe(self, server: AsyncBackend) -> OrsError | None:
        try:
            await server.probe()
        except OrsError as exc:
            if server not in self.down and len(self.servers) > 1:
                logger.warning("the ORS server at %s stopped answering; its sub-envs report "
                               "server_unreachable until it is back", server.location)
            self.down.add(server)
            last = self._backoff.get(server)
            wait = PROBE_BACKOFF_S if last is None else min(last[2] * 2, PROBE_BACKOFF_MAX_S)
            self._backoff[server] = (exc, self._clock() + wait, wait)
            return exc
        self.down.discard(server)
        self._backoff.pop(server, None)
        return None

    async def check(self, server: AsyncBackend, i: int, failure: OrsError,
                    hosted: Sequence[int], env_name: str) -> None:
        """After sub-env ``i``'s connection failure on ``server`` (which hosts sub-envs
        ``hosted``): note the server down if its probe fails; raise if every server is."""
        probe_error = await self.probe(server)
        if probe_error is None or len(self.down) < len(self.servers):
            return
        # Every server looks down: ask the others again, one may be back since it was noted.
        await asyncio.gather(*(self.probe(s) for s in self.servers if s is not server))
        if len(self.down) < len(self.servers):
            return
        if len(self.servers) == 1:
            what = (f"the ORS server at {server.location} stopped answering "
                    f"({probe_error.message}); the sub-envs it hosts "
                    f"({', '.join(map(str, hosted))}) cannot go on. Start it again")
        else:
            what = ("every ORS server stopped answering ("
                    + ", ".join(s.location for s in self.servers) + "). Start them again")
        raise OrsConnectionError(
            f"{what} and call reset(), or leave it out of base_url. "
            f"First failure, in sub-env {i}: {failure.message}",
            server=server.location, env_name=env_name,
        ) from failure

    @staticmethod
    def unreachable(i: int, server: AsyncBackend, env_name: str,
                    exc: OrsError | None = None) -> Outcome:
        """A truncated step of sub-env ``i``: its server does not answer."""
        error = exc or OrsConnectionError(
            f"the ORS server at {server.location} does not answer; sub-env {i} opens a new "
            "episode on it once it does", server=server.location, env_name=env_name,
        )
        info = {"error": str(error), "error_reason": "server_unreachable",
                "truncation_reason": "session_lost"}
        return Outcome(i, empty_observation(), 0.0, False, True, info, None, error)
