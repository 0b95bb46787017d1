"""One episode of a token batch: ``AsyncTokenEnv`` whose failures end only itself.

A batch runs many episodes, so one episode's failure must not reach the others.
:class:`BatchEpisode` is an :class:`~ors_gym.tokens.AsyncTokenEnv` over a
pool's env that turns a failing reset or step into the end of its own episode:
an ORS error ends it with its stop reason (``env_error``, ``timeout``,
``parse_error``) and ``info["error"]``; any other exception (a bridge's or
chat template's) ends it with ``env_error``, logged once at WARNING with its
traceback. The record owns the failure (``TokenRecord.fail_start``, ``fail``):
its ``finish`` changes nothing when it raises, so there is nothing to undo.
Bad input still raises (reset options the environment refuses as a
``ValueError``/``TypeError``; ids outside the vocabulary, at ``read``). The
episode's session is given back the moment the episode ends.
"""

from __future__ import annotations

import logging
from typing import Any

from ors_gym.async_env import AsyncOrsEnv
from ors_gym.errors import OrsError
from ors_gym.tokens import stops
from ors_gym.tokens._open import EpisodeRow
from ors_gym.tokens._record import Read, TokenStep, describe
from ors_gym.tokens.async_env import AsyncTokenEnv

__all__ = ["BatchEpisode"]

logger = logging.getLogger("ors_gym")

class BatchEpisode(AsyncTokenEnv):
    """The episode of ``row`` over ``env`` (a pool's, sharing its backend); ``ids`` is its
    last observation. The other arguments are ``AsyncTokenEnv``'s."""

    def __init__(self, row: EpisodeRow, env: AsyncOrsEnv, tokenizer: Any, **kwargs: Any) -> None:
        super().__init__(env, tokenizer, **kwargs)
        self.row = row
        self.ids: list[int] = []

    @property
    def done(self) -> bool:
        """The episode has ended (or never started)."""
        traj = self._record.trajectory
        return traj is None or traj.done

    async def open(self) -> tuple[list[int], dict[str, Any]]:
        """Reset the row's episode; a failure ends it here (its session given back)."""
        try:
            opened = await self._open(self.row.seed, self.row.options)
        except OrsError as exc:  # this episode's environment failed
            return await self._failed_start(exc)
        except (ValueError, TypeError):  # bad options: the caller's mistake, raised
            raise
        except Exception as exc:
            return await self._failed_start(exc, "reset")
        try:
            out = self._begin(*opened)
        except Exception as exc:  # the bridge could not render the opening
            return await self._failed_start(exc, "first prompt")
        self.ids = list(out[0])
        return out

    def read(self, action: Any) -> Read:
        """The sampled turn of ``action`` (bad ids raise here, before any I/O)."""
        return self._record.read(action)

    async def play(self, read: Read) -> TokenStep:
        """Run a read turn; a failure ends the episode with the turn kept, no reward."""
        try:
            out = await self._play(read)
        except OrsError as exc:  # a row with on_error="raise", or a refused action
            out = self._record.fail(read[0], read[1], read[2], exc)
        except Exception as exc:  # a bridge's, a template's, a backend's own error
            self._log(exc, "step")
            out = self._record.fail(read[0], read[1], read[2], exc)
        self.ids = list(out[0])
        if self.done:  # the session is given back as soon as the episode ends
            await self.env.end_session()
        return out

    def fail(self, exc: BaseException, where: str) -> dict[str, Any]:
        """End the episode for a failure outside the environment (its sampler's): logged,
        ``env_error``, no turn recorded. The session is the caller's to give back."""
        self._log(exc, where)
        self._record.end(stops.ENV_ERROR)
        return {"error": describe(exc), "stop_reason": stops.ENV_ERROR}

    def stop(self, reason: str) -> None:
        """End the episode now with ``reason``, if it runs (the session stays: ``end()``)."""
        self._record.end(reason)

    async def end(self) -> None:
        """Give the session back (the episode may have ended already)."""
        await self.env.end_session()

    async def _failed_start(self, exc: Exception, where: str | None = None
                            ) -> tuple[list[int], dict[str, Any]]:
        if where is not None:
            self._log(exc, where)
        await self.env.end_session()
        ids, info = self._record.fail_start(exc)
        self.ids = ids
        return list(ids), {**info, "env_id": self.row.env_id}

    def _log(self, exc: BaseException, where: str) -> None:
        logger.warning("an episode of %s (%s) ended with env_error: its %s raised %s",
                       self.row.env_id, self.row.options, where, describe(exc), exc_info=exc)
