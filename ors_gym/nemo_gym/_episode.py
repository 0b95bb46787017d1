"""The ORS side of a NeMo Gym resources server: one ORS episode per NeMo Gym session.

:class:`Episodes` keeps the episodes by session key over ONE shared backend (an
``EnvPool`` stack: one connection pool and one tool discovery per process). Every
method is a coroutine run on the server's own event loop (a ``Runtime``), never on
the loop of the request that asked, so the backend outlives any request's loop.
What a NeMo Gym route needs is here, free of HTTP: open a task's session (refusing
a row whose prompt no longer matches), run a tool call, grade the final answer
(routed to the terminal tool, as ``OrsEnv`` routes a plain message) and release
the session. An ORS failure is kept on the episode and named with NeMo Gym's
failure vocabulary (:func:`failure_kind`), never raised into a route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ors_gym.actions import AssistantTurn, ToolCall
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.errors import (
    OrsConnectionError,
    OrsError,
    OrsPaymentError,
    OrsSessionExpired,
    OrsTimeoutError,
    OrsToolError,
)
from ors_gym.nemo_gym._responses import prompt_digest, responses_input, tool_text
from ors_gym.reward_parts import add_parts, step_parts
from ors_gym.tokens import EnvPool, EpisodeRow

__all__ = ["ROW_KEYS", "Episode", "Episodes", "SeedRefused", "Verdict", "failure_kind"]

logger = logging.getLogger("ors_gym")

#: The row fields naming an ORS task (written by ``dataset_rows``, read at seed).
ROW_KEYS = ("ors_split", "ors_index", "ors_task_spec", "ors_prompt_sha256")


class SeedRefused(ValueError):
    """A seed the server will not open: a closed session, another episode's id, a stale
    prompt, a row naming no task. ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


def failure_kind(exc: OrsError) -> str:
    """NeMo Gym's name (``nemo_gym.failure_kinds``) for an ORS failure."""
    if isinstance(exc, OrsSessionExpired):
        return "session_expired"
    if isinstance(exc, OrsTimeoutError):
        return "transport_timeout"
    if isinstance(exc, OrsConnectionError):
        return "transport_unreachable"
    if isinstance(exc, OrsPaymentError):
        return "provider_quota_exhausted"
    if isinstance(exc, OrsToolError):
        return "verifier_error"  # the environment's own code raised
    return "provider_unavailable"


def reset_options(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The reset options a row's fields name: ``ors_task_spec``, or ``ors_split`` and
    ``ors_index``; SeedRefused (422) naming the fields when it names no task."""
    spec = fields.get("ors_task_spec")
    if isinstance(spec, Mapping):
        return {"task_spec": dict(spec)}
    index, split = fields.get("ors_index"), fields.get("ors_split")
    if isinstance(index, int) and not isinstance(index, bool):
        return {"index": index} if split is None else {"index": index, "split": str(split)}
    raise SeedRefused(
        "the row names no ORS task: give it ors_split and ors_index (or ors_task_spec); "
        "`ors-gym nemo-gym dataset ENV_ID --split SPLIT -o rows.jsonl` writes such rows",
        status=422,
    )


@dataclass
class Verdict:
    """What ``verify`` answers: the episode's return and how it came about."""

    reward: float
    components: dict[str, float]
    steps: int
    rewards: list[float]
    finished: bool
    failure_kind: str | None = None
    failure_reason: str | None = None
    prompt_mismatch: bool = False


@dataclass
class Episode:
    """One NeMo Gym session's ORS episode and what it has returned so far."""

    env: AsyncOrsEnv
    identity: tuple[str, str] | None = None  # (episode_id, task_id) of a typed seed
    rewards: list[float] = field(default_factory=list)
    parts: dict[str, float] = field(default_factory=dict)
    finished: bool = False  # terminated, or truncated (the step limit)
    failure: OrsError | None = None
    prompt_mismatch: bool = False
    verdict: Verdict | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _ended_text(self, name: str) -> str | None:
        if self.failure is not None:
            return f"The episode ended: {self.failure}. {name} was not run."
        if self.finished or self.verdict is not None:
            return (f"The episode has finished: {name} was not run. No more tool calls are "
                    "taken; reply with your final answer.")
        return None

    async def _step(self, turn: AssistantTurn) -> list[Any]:
        """Run one step; its result blocks (an ORS failure is kept, and ends the episode)."""
        try:
            _, reward, terminated, truncated, info = await self.env.step(turn)
        except OrsError as exc:
            logger.warning("ORS episode failed (%s): %s", failure_kind(exc), exc)
            self.failure = exc
            return []
        self.rewards.append(float(reward))
        add_parts(self.parts, step_parts(info))
        self.finished = bool(terminated or truncated)
        return list(info.get("blocks") or ())

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool call; the text the agent is shown."""
        async with self.lock:
            ended = self._ended_text(name)
            if ended is not None:
                return ended
            blocks = await self._step(AssistantTurn((ToolCall(name, dict(arguments)),), ""))
            if self.failure is not None:
                return f"The episode ended: {self.failure}"
            return tool_text(blocks)

    async def grade(self, answer: str | None) -> Verdict:
        """The verdict, once: ``answer`` (the final assistant message, None if the agent
        ended otherwise) goes to the terminal tool first if the episode is still open.
        The ORS session is released afterwards."""
        async with self.lock:
            if self.verdict is not None:
                return self.verdict
            if (answer is not None and self.failure is None and not self.finished
                    and self.env.terminal_tool is not None):
                await self._step(AssistantTurn((), answer))
            failure = self.failure
            self.verdict = Verdict(
                reward=0.0 if failure is not None else sum(self.rewards),
                components=dict(self.parts), steps=len(self.rewards),
                rewards=list(self.rewards), finished=self.finished,
                failure_kind=None if failure is None else failure_kind(failure),
                failure_reason=None if failure is None else str(failure),
                prompt_mismatch=self.prompt_mismatch,
            )
            await self.env.end_session()
            return self.verdict


class Episodes:
    """The episodes of one resources server, by session key, over one shared backend.

    ``env_id`` and ``env_kwargs`` name the environment as ``gymnasium.make`` does;
    ``on_prompt_mismatch``: ``"refuse"`` a seed whose row's prompt no longer matches the
    live task, or ``"flag"`` it (the verdict says so, a WARNING is logged).
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], *,
                 on_prompt_mismatch: Literal["refuse", "flag"] = "refuse") -> None:
        self.row = EpisodeRow(env_id, dict(env_kwargs))
        self.on_prompt_mismatch = on_prompt_mismatch
        self.pool = EnvPool(on_error="raise")
        self.open: dict[str, Episode] = {}
        self.closed: set[str] = set()

    def env(self) -> AsyncOrsEnv:
        """A new env over the shared backend."""
        return self.pool.env(self.row)

    async def seed(self, key: str, fields: Mapping[str, Any],
                   identity: tuple[str, str] | None = None) -> Episode:
        """Open ``key``'s episode for the task ``fields`` name. A typed seed (``identity``
        given) of a key already open returns that episode; a legacy seed starts over."""
        if key in self.closed:
            raise SeedRefused(f"resources session {key!r} is closed: seed a new session id")
        current = self.open.get(key)
        if current is not None and identity is not None:
            if current.identity != identity:
                raise SeedRefused(
                    f"resources session {key!r} is bound to another episode or task")
            async with current.lock:  # a first seed still opening it finishes first
                pass
            if self.open.get(key) is not current:
                raise SeedRefused(f"resources session {key!r} failed to open or was closed; "
                                  "seed a new session id", status=503)
            return current
        options = reset_options(fields)
        if current is not None:
            await self.release(key)
        episode = Episode(self.env(), identity)
        self.open[key] = episode  # before any await: a close or a repeated seed finds it
        try:
            async with episode.lock:  # tool calls and repeated seeds wait for the opening
                episode.env.prefetch_messages = True
                await episode.env.reset(options=options)
                expected = fields.get("ors_prompt_sha256")
                if expected is not None:
                    live = prompt_digest(responses_input(await episode.env.messages()))
                    if live != expected:
                        self._mismatch(key, episode)
        except BaseException:
            if self.open.get(key) is episode:
                del self.open[key]
            await episode.env.close()
            raise
        if self.open.get(key) is not episode:  # closed while it opened
            await episode.env.close()
            raise SeedRefused(f"resources session {key!r} was closed while it opened")
        return episode

    def _mismatch(self, key: str, episode: Episode) -> None:
        if self.on_prompt_mismatch == "refuse":
            raise SeedRefused(
                "the row's prompt no longer matches the task's live prompt (the environment "
                "changed since the rows were written): write the rows again with "
                "`ors-gym nemo-gym dataset`, or set on_prompt_mismatch: flag to go on")
        logger.warning("resources session %s: the row's prompt no longer matches the task's "
                       "live prompt; the verdict is flagged (ors_prompt_mismatch)", key)
        episode.prompt_mismatch = True

    async def call(self, key: str, name: str, arguments: Mapping[str, Any]) -> str | None:
        """Run ``name`` in ``key``'s episode; None if ``key`` has no episode."""
        episode = self.open.get(key)
        return None if episode is None else await episode.call(name, arguments)

    async def grade(self, key: str, answer: str | None) -> Verdict | None:
        """``key``'s verdict (its ORS session released); None if it has no episode. A
        typed session keeps its verdict until ``close``; a legacy one, never closed by
        its caller, is forgotten at once."""
        episode = self.open.get(key)
        if episode is None:
            return None
        verdict = await episode.grade(answer)
        if episode.identity is None and self.open.get(key) is episode:
            del self.open[key]
        return verdict

    async def release(self, key: str) -> None:
        """Delete ``key``'s ORS session, if it has one (the key may be seeded again)."""
        episode = self.open.pop(key, None)
        if episode is not None:
            await episode.env.close()

    async def close(self, key: str) -> None:
        """Release ``key``'s episode and refuse any later seed of it; idempotent."""
        self.closed.add(key)
        await self.release(key)

    async def aclose(self) -> None:
        """Release every episode and close the shared backend."""
        for key in list(self.open):
            await self.release(key)
        await self.pool.aclose()
