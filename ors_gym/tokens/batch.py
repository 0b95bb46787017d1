"""A batch of token episodes: ``TokenEnv``'s twin of ``OrsVectorEnv``.

``AsyncTokenBatch`` runs N token episodes on one event loop, in either of two
forms. **Lockstep** (``reset``, ``step``): every episode's reset, and each turn
every running episode's step, are awaited together (``asyncio.gather``), so N
slow setups or N slow tools take as long as one; the caller samples all the
episodes' next turns at once in between. **Free-running** (``run_free``): each
episode samples its next turn as soon as its own step returns, and is handed
back as it ends (see ``_free``), so a slow tool holds up only its own episode.

Each episode is an ``AsyncTokenEnv`` (``_episode.BatchEpisode``) over an
:class:`~ors_gym.tokens.EnvPool`: one backend (one connection pool, one
``/tools`` discovery) per environment id and arguments, kept across batches.
One bridge serves the whole batch (it keeps no episode's state: a vision
model's image data is each row's own, handed to the bridge at each step). An episode's
failure stays its own: it ends with its stop reason (``env_error``,
``timeout``, ``parse_error``) and ``info["error"]`` while the others go on; an
episode's session is deleted the moment the episode ends.

``TokenBatch`` is the blocking face, over a private event loop (``Runtime``).
Results are lists in the order of the rows, as Gymnasium's vector envs give
them (``obs, rewards, terminations, truncations, infos``), but with token lists
for observations and one info dict per episode.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from functools import partial
from typing import Any

from ors_gym import _cleanup
from ors_gym._runtime import Runtime, blocking
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.sampling import TokenSampler
from ors_gym.tokens import stops
from ors_gym.tokens._choose import make_bridge
from ors_gym.tokens._episode import BatchEpisode
from ors_gym.tokens._free import EndedEpisode, OnSample, SampleSettings, run_free
from ors_gym.tokens._open import EnvPool, EpisodeRow
from ors_gym.tokens._record import TokenRecord
from ors_gym.tokens._room import Budget, Room
from ors_gym.tokens._vision import split_processor
from ors_gym.tokens.bridge import Bridge
from ors_gym.tokens.trajectory import Trajectory

__all__ = ["AsyncTokenBatch", "TokenBatch"]

Results = tuple[list[list[int]], list[float], list[bool], list[bool], list[dict[str, Any]]]
Rows = Sequence[EpisodeRow | Mapping[str, Any]]


class AsyncTokenBatch:
    """N token episodes on one event loop, in lockstep or free-running.

    ``tokenizer``, ``renderer``, ``max_tokens``, ``system`` and
    ``chat_template_kwargs`` and ``processor`` are ``TokenEnv``'s, for every episode.
    ``pool``: an :class:`~ors_gym.tokens.EnvPool` to open episodes over (shared
    with other batches on the same loop, and not closed with this one); by
    default the batch makes its own and closes it in ``close()``. The episodes
    share one bridge: a vision model's image data is each row's own.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        renderer: Any = None,
        max_tokens: int | None = None,
        system: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        pool: EnvPool | None = None,
        processor: Any = None,
    ) -> None:
        tokenizer, self.processor = split_processor(tokenizer, processor)
        self.tokenizer = tokenizer
        self.bridge: Bridge = make_bridge(tokenizer, renderer, chat_template_kwargs,
                                          self.processor)
        TokenRecord(tokenizer, self.bridge, None, max_tokens=max_tokens, system=system)  # checks
        self.max_tokens = max_tokens
        self.system = system
        self.pool = pool if pool is not None else EnvPool()
        self._owns_pool = pool is None
        self._episodes: list[BatchEpisode] = []

    # -- what the lockstep batch holds ------------------------------------------------------
    def __len__(self) -> int:
        return len(self._episodes)

    @property
    def trajectories(self) -> list[Trajectory]:
        """Each episode's token record, in the order of the rows."""
        return [e.trajectory for e in self._episodes]

    @property
    def running(self) -> list[int]:
        """The indices of the episodes that have not ended."""
        return [k for k, e in enumerate(self._episodes) if not e.done]

    @property
    def envs(self) -> list[AsyncOrsEnv]:
        """Each episode's ``AsyncOrsEnv`` (its session, tools and catalog)."""
        return [e.env for e in self._episodes]

    # -- lockstep ---------------------------------------------------------------------------
    async def reset(self, rows: Rows) -> tuple[list[list[int]], list[dict[str, Any]]]:
        """Start one episode per row (an :class:`EpisodeRow`, or a dataset row
        ``EpisodeRow.from_row`` reads), all at once; the episodes still open from the
        previous reset end first. Returns each first prompt's ids and reset info."""
        wanted = _rows(rows)
        await self.end()
        self._episodes = episodes = [self._episode(row) for row in wanted]
        results = await asyncio.gather(*(e.open() for e in episodes), return_exceptions=True)
        raised = next((r for r in results if isinstance(r, BaseException)), None)
        if raised is not None:  # bad input, not a failing environment: nothing stays open
            await self.end()
            raise raised
        opened = [r for r in results if not isinstance(r, BaseException)]
        return [ids for ids, _ in opened], [info for _, info in opened]

    async def step(self, actions: Sequence[Any]) -> Results:
        """One turn of every episode given an action (its sampled ids, or
        ``{"ids", "logprobs", "policy_version"}``; None: not stepped), all at once.
        Returns lists in the rows' order; an episode not stepped repeats its ids with
        reward 0, no flags and an empty info. Stepping an episode that has ended is an
        error."""
        if len(actions) != len(self._episodes):
            raise ValueError(
                f"step() takes one action per episode ({len(self._episodes)}), got "
                f"{len(actions)}: pass None for an episode not to step")
        planned = []
        for k, (episode, action) in enumerate(zip(self._episodes, actions, strict=True)):
            if action is None:
                continue
            if episode.done:
                raise RuntimeError(
                    f"episode {k} has ended ({episode.trajectory.stop_reason}): pass None "
                    "for it, or reset() the batch")
            planned.append((k, episode.read(action)))  # bad ids raise before any I/O
        done = await asyncio.gather(*(self._episodes[k].play(read) for k, read in planned),
                                    return_exceptions=True)
        raised = next((r for r in done if isinstance(r, BaseException)), None)
        if raised is not None:  # not an episode's failure (those end their episode): ours
            raise raised
        n = len(self._episodes)
        obs = [list(e.ids) for e in self._episodes]
        rewards, terms, truncs = [0.0] * n, [False] * n, [False] * n
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        for (k, _), out in zip(planned, done, strict=True):
            assert not isinstance(out, BaseException)
            obs[k], rewards[k], terms[k], truncs[k], infos[k] = out
        return obs, rewards, terms, truncs, infos

    async def end(self, reason: str | None = None, *,
                  episodes: Sequence[int] | None = None) -> None:
        """End every episode still open now, or those of ``episodes`` (indices), their
        sessions deleted at once. ``reason``: the stop reason of those not ended yet (say
        ``max_tokens`` when the trainer's budget ran out, ``context_overflow`` when a first
        prompt does not fit the model); None leaves them as they are."""
        if reason is not None and reason not in stops.STOP_REASONS:
            raise ValueError(f"reason must be one of {stops.STOP_REASONS}, got {reason!r}")
        chosen = self._episodes if episodes is None else [self._episodes[k] for k in episodes]
        for episode in chosen:
            if reason is not None:
                episode.stop(reason)
        await asyncio.gather(*(e.end() for e in chosen))

    # -- free-running -----------------------------------------------------------------------
    def run_free(
        self,
        rows: Rows,
        sampler: TokenSampler,
        *,
        max_tokens: int | None = None,
        budget: Budget = "row",
        max_prompt: int | None = None,
        max_model_len: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_in_flight: int | None = None,
        on_sample: OnSample | None = None,
    ) -> AsyncIterator[EndedEpisode]:
        """Play one episode per row, each on its own: as soon as an episode's previous step
        returns, ``sampler`` samples its next turn (stopping at the bridge's stop ids), and
        each episode is yielded as an :class:`EndedEpisode` the moment it ends, its session
        already given back. The limits are ``run_lockstep``'s: ``max_tokens`` (default: the
        batch's) counted as ``budget`` says (``"row"``, ``"episode"`` or ``"sampled"``),
        else the episode ends with ``max_tokens``; ``max_prompt`` (the first prompt) and
        ``max_model_len`` (every prompt, and no turn asks past it), else it ends with
        ``context_overflow``. A sampler's exception, or a sample whose finish reason is
        ``"abort"``, ends its episode with ``env_error``. ``on_sample(index, answer)``,
        for observation only, is told each answer (a ``Sample`` or that exception). At
        most ``max_in_flight`` episodes are open at once (default: all). Use it within
        ``contextlib.aclosing`` to stop early: closing ends the episodes still running.
        The lockstep episodes (``trajectories``) are not touched."""
        room = Room(self.max_tokens if max_tokens is None else max_tokens, budget, max_prompt,
                    max_model_len)
        settings = SampleSettings(sampler, room, sorted(self.bridge.stops), temperature, top_p,
                                  on_sample)
        return run_free([self._episode(row) for row in _rows(rows)], settings, max_in_flight)

    # -- closing ----------------------------------------------------------------------------
    async def close(self) -> None:
        """End the open episodes; close the pool if the batch made it."""
        try:
            await self.end()
        finally:
            if self._owns_pool:
                await self.pool.aclose()

    async def __aenter__(self) -> AsyncTokenBatch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _episode(self, row: EpisodeRow) -> BatchEpisode:
        return BatchEpisode(row, self.pool.env(row), self.tokenizer, renderer=self.bridge,
                            max_tokens=self.max_tokens, system=self.system,
                            processor=self.processor)


def _rows(rows: Rows) -> list[EpisodeRow]:
    return [r if isinstance(r, EpisodeRow) else EpisodeRow.from_row(r) for r in rows]


class TokenBatch:
    """:class:`AsyncTokenBatch`'s lockstep form with blocking ``reset``, ``step``, ``end``
    and ``close``, run on a private event loop (its episodes' I/O still overlaps). Takes
    ``AsyncTokenBatch``'s arguments but ``pool`` (it keeps its own)."""

    def __init__(self, tokenizer: Any, **kwargs: Any) -> None:
        if "pool" in kwargs:
            raise TypeError("TokenBatch keeps its own pool (on its own event loop); "
                            "use AsyncTokenBatch to share one")
        self.runtime = Runtime(f"ors-token-batch-{id(self):x}")
        self.core = AsyncTokenBatch(tokenizer, **kwargs)
        self._finalizer = weakref.finalize(
            self, _cleanup.schedule, partial(_release, self.runtime, self.core))

    def __len__(self) -> int:
        return len(self.core)

    @property
    def batch(self) -> AsyncTokenBatch:
        """The :class:`AsyncTokenBatch` this face runs."""
        return self.core

    @property
    def trajectories(self) -> list[Trajectory]:
        return self.core.trajectories

    @property
    def running(self) -> list[int]:
        return self.core.running

    @property
    def pool(self) -> EnvPool:
        return self.core.pool

    reset = blocking(AsyncTokenBatch.reset)
    step = blocking(AsyncTokenBatch.step)
    end = blocking(AsyncTokenBatch.end)

    def close(self) -> None:
        """End the open episodes, close the pool and the event loop; safe twice."""
        self._finalizer.detach()
        _release(self.runtime, self.core)

    def __enter__(self) -> TokenBatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _release(runtime: Runtime, batch: AsyncTokenBatch) -> None:
    runtime.close(batch.close())
