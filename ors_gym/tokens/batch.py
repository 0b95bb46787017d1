"""A batch of token episodes: ``TokenEnv``'s twin of ``OrsVectorEnv``.

``AsyncTokenBatch`` runs N token episodes on one event loop: every episode's
reset, and each turn every running episode's step, are awaited together
(``asyncio.gather``), so N slow setups or N slow tools take as long as one.
The episodes open through :class:`~ors_gym.tokens.Backends`: one backend (one
connection pool, one ``/tools`` discovery) per environment id and arguments,
kept across batches. One bridge serves the whole batch (a bridge keeps no
episode's state, but a multimodal renderer's image data: then each episode
has its own). An episode's failure stays its own: it ends with its stop reason
(``env_error``, ``timeout``, ``parse_error``) and ``info["error"]`` while the
others go on; so does any other exception of one episode's reset or step (a
bridge's or chat template's error: ``env_error``, logged at WARNING with its
traceback). An episode's session is deleted the moment the episode ends.

``TokenBatch`` is the blocking face, over a private event loop (``Runtime``).
Results are lists in the order of the rows, as Gymnasium's vector envs give
them (``obs, rewards, terminations, truncations, infos``), but with token lists
for observations and one info dict per episode.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ors_gym import _cleanup
from ors_gym._runtime import Runtime
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.errors import OrsActionError, OrsError, OrsTimeoutError
from ors_gym.tokens import stops
from ors_gym.tokens._choose import make_bridge
from ors_gym.tokens._open import Backends, EpisodeRow
from ors_gym.tokens._record import TokenRecord, max_calls
from ors_gym.tokens._vision import split_processor
from ors_gym.tokens.bridge import Bridge
from ors_gym.tokens.trajectory import TokenRow, Trajectory

__all__ = ["AsyncTokenBatch", "TokenBatch"]

logger = logging.getLogger("ors_gym")

Results = tuple[list[list[int]], list[float], list[bool], list[bool], list[dict[str, Any]]]
_Read = tuple[list[int], list[float] | None, str, Any]


@dataclass
class _Slot:
    """One episode of the batch: its row, env, record and last observation."""

    row: EpisodeRow
    env: AsyncOrsEnv
    episode: TokenRecord
    ids: list[int]

    @property
    def trajectory(self) -> Trajectory:
        assert self.episode.trajectory is not None
        return self.episode.trajectory


class AsyncTokenBatch:
    """N token episodes, reset and stepped together on one event loop.

    ``tokenizer``, ``renderer``, ``max_tokens``, ``system`` and
    ``chat_template_kwargs`` and ``processor`` are ``TokenEnv``'s, for every episode.
    ``backends``: a :class:`~ors_gym.tokens.Backends` to open episodes over
    (shared with other batches on the same loop, and not closed with this one);
    by default the batch makes its own and closes it in ``close()``.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        renderer: Any = None,
        max_tokens: int | None = None,
        system: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        backends: Backends | None = None,
        processor: Any = None,
    ) -> None:
        tokenizer, self.processor = split_processor(tokenizer, processor)
        self.tokenizer = tokenizer
        self._renderer = renderer
        self._template = dict(chat_template_kwargs or {})
        self.bridge: Bridge = make_bridge(tokenizer, renderer, self._template, self.processor)
        TokenRecord(tokenizer, self.bridge, None, max_tokens=max_tokens, system=system)  # checks
        self.max_tokens = max_tokens
        self.system = system
        self.backends = backends if backends is not None else Backends()
        self._owns_backends = backends is None
        self._slots: list[_Slot] = []

    # -- what the batch holds ---------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slots)

    @property
    def trajectories(self) -> list[Trajectory]:
        """Each episode's token record, in the order of the rows."""
        return [s.trajectory for s in self._slots]

    @property
    def running(self) -> list[int]:
        """The indices of the episodes that have not ended."""
        return [k for k, s in enumerate(self._slots) if not s.trajectory.done]

    @property
    def envs(self) -> list[AsyncOrsEnv]:
        """Each episode's ``AsyncOrsEnv`` (its session, tools and catalog)."""
        return [s.env for s in self._slots]

    # -- episodes ---------------------------------------------------------------------------
    async def reset(
        self, rows: Sequence[EpisodeRow | Mapping[str, Any]]
    ) -> tuple[list[list[int]], list[dict[str, Any]]]:
        """Start one episode per row (an :class:`EpisodeRow`, or a dataset row
        ``EpisodeRow.from_row`` reads), all at once; the episodes still open from the
        previous reset end first. Returns each first prompt's ids and reset info."""
        wanted = [r if isinstance(r, EpisodeRow) else EpisodeRow.from_row(r) for r in rows]
        await self.end()
        slots = [_Slot(row, self.backends.env(row), self._record(), []) for row in wanted]
        self._slots = slots
        results = await asyncio.gather(*(self._open(s) for s in slots), return_exceptions=True)
        raised = next((r for r in results if isinstance(r, BaseException)), None)
        if raised is not None:  # bad input, not a failing environment: nothing stays open
            await self.end()
            raise raised
        opened = [r for r in results if not isinstance(r, BaseException)]
        return [ids for ids, _ in opened], [info for _, info in opened]

    async def step(self, actions: Sequence[Any]) -> Results:
        """One turn of every episode given an action (its sampled ids, or
        ``{"ids", "logprobs"}``; None: not stepped), all at once. Returns lists in the
        rows' order; an episode not stepped repeats its ids with reward 0, no flags and
        an empty info. Stepping an episode that has ended is an error."""
        if len(actions) != len(self._slots):
            raise ValueError(
                f"step() takes one action per episode ({len(self._slots)}), got "
                f"{len(actions)}: pass None for an episode not to step")
        planned: list[tuple[int, _Read]] = []
        for k, (slot, action) in enumerate(zip(self._slots, actions, strict=True)):
            if action is None:
                continue
            if slot.trajectory.done:
                raise RuntimeError(
                    f"episode {k} has ended ({slot.trajectory.stop_reason}): pass None for it, "
                    "or reset() the batch")
            planned.append((k, slot.episode.read(action)))  # bad ids raise before any I/O
        done = await asyncio.gather(*(self._step(self._slots[k], read) for k, read in planned),
                                    return_exceptions=True)
        raised = next((r for r in done if isinstance(r, BaseException)), None)
        if raised is not None:  # not an episode's failure (those end their episode): ours
            raise raised
        n = len(self._slots)
        obs = [list(s.ids) for s in self._slots]
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
        slots = self._slots if episodes is None else [self._slots[k] for k in episodes]
        for slot in slots:
            traj = slot.episode.trajectory
            if reason is not None and traj is not None and not traj.done:
                traj.stop_reason = reason
        await asyncio.gather(*(s.env.end_session() for s in slots))

    async def close(self) -> None:
        """End the open episodes; close the backends if the batch made them."""
        try:
            await self.end()
        finally:
            if self._owns_backends:
                await self.backends.aclose()

    async def __aenter__(self) -> AsyncTokenBatch:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- one episode ------------------------------------------------------------------------
    def _record(self) -> TokenRecord:
        bridge = self.bridge
        if bridge.multimodal and not isinstance(self._renderer, Bridge):
            # a multimodal renderer keeps the episode's image data: one per episode
            bridge = make_bridge(self.tokenizer, self._renderer, self._template, self.processor)
        return TokenRecord(self.tokenizer, bridge, None, max_tokens=self.max_tokens,
                           system=self.system)

    async def _open(self, slot: _Slot) -> tuple[list[int], dict[str, Any]]:
        env, row = slot.env, slot.row
        env.prefetch_messages = True
        try:
            observation, info = await env.reset(seed=row.seed, options=row.options)
            opening = await env.messages()
        except OrsError as exc:  # this episode's environment failed: it ends here
            await env.end_session()
            return self._failed_reset(slot, exc)
        except (ValueError, TypeError):  # bad options: reset() ends the batch and raises
            raise
        except Exception as exc:
            return await self._unexpected_reset(slot, exc, "reset")
        try:
            slot.ids = slot.episode.start(opening, env.tools_as("openai"), observation)
        except Exception as exc:  # the bridge could not render the opening
            return await self._unexpected_reset(slot, exc, "first prompt")
        return list(slot.ids), slot.episode.reset_info(info, observation)

    async def _unexpected_reset(self, slot: _Slot, exc: Exception, where: str
                                ) -> tuple[list[int], dict[str, Any]]:
        _log_unexpected(slot, exc, where)
        await slot.env.end_session()
        return self._failed_reset(slot, exc)

    def _failed_reset(self, slot: _Slot, exc: Exception) -> tuple[list[int], dict[str, Any]]:
        """The record of an episode whose reset failed: an empty user turn's prompt (none
        if the bridge cannot render even that), no turn, the failure's stop reason."""
        reason = _failure(exc)
        messages: list[dict[str, Any]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": ""})
        bridge = slot.episode.bridge
        try:
            prompt = bridge.prompt(messages, [])
        except Exception:  # the bridge's own failure, logged by the caller
            prompt = []
        slot.episode.trajectory = Trajectory(
            rows=[TokenRow(prompt_ids=prompt)], messages=messages, tools=[],
            renderer=bridge.name, stop_reason=reason)
        slot.ids = list(prompt)
        return list(prompt), {"error": _describe(exc), "stop_reason": reason,
                              "env_id": slot.row.env_id}

    async def _step(self, slot: _Slot, read: _Read
                    ) -> tuple[list[int], float, bool, bool, dict[str, Any]]:
        ids, logprobs, text, turn = read
        episode, env = slot.episode, slot.env
        restore = _mark(slot.trajectory)
        try:
            result = await env.step(turn.action)
            out = episode.finish(ids, logprobs, text, turn, result, max_calls(env))
        except OrsError as exc:  # a row with on_error="raise", or a refused action
            restore()
            out = _failed_step(episode, ids, logprobs, text, exc)
        except Exception as exc:  # a bridge's, a template's, a backend's own error
            _log_unexpected(slot, exc, "step")
            restore()  # what finish() recorded before it raised
            out = _failed_step(episode, ids, logprobs, text, exc)
        slot.ids = out[0]
        if slot.trajectory.done:  # the session is given back as soon as the episode ends
            await env.end_session()
        return out


def _failure(exc: Exception) -> str:
    if isinstance(exc, OrsActionError):
        return stops.PARSE_ERROR
    return stops.TIMEOUT if isinstance(exc, OrsTimeoutError) else stops.ENV_ERROR


def _describe(exc: Exception) -> str:
    """``info["error"]``: an ORS error's own message; any other names its type too."""
    return str(exc) if isinstance(exc, OrsError) else f"{type(exc).__name__}: {exc}"


def _log_unexpected(slot: _Slot, exc: Exception, where: str) -> None:
    logger.warning("an episode of %s (%s) ended with env_error: its %s raised %s",
                   slot.row.env_id, slot.row.options, where, _describe(exc), exc_info=exc)


def _mark(traj: Trajectory) -> Callable[[], None]:
    """A function putting ``traj`` back as it is now (undoing a step that raised midway)."""
    rows, last = len(traj.rows), traj.rows[-1]
    sizes, turns = len(last.completion_ids), last.turns
    rewards, messages, images = len(traj.rewards), len(traj.messages), len(traj.images)
    given, data = traj.logprobs_given, traj.multi_modal_data

    def restore() -> None:
        del traj.rows[rows:]
        for values in (last.completion_ids, last.mask, last.logprobs):
            del values[sizes:]
        last.turns = turns
        del traj.rewards[rewards:], traj.messages[messages:], traj.images[images:]
        traj.logprobs_given, traj.multi_modal_data, traj.stop_reason = given, data, None

    return restore


def _failed_step(episode: TokenRecord, ids: list[int], logprobs: list[float] | None, text: str,
                 exc: Exception) -> tuple[list[int], float, bool, bool, dict[str, Any]]:
    """End an episode whose step raised: the sampled turn kept, closed, no reward."""
    traj = episode.trajectory
    assert traj is not None
    row = traj.rows[-1]
    row._add(ids, sampled=True, logprobs=logprobs)
    try:
        closing = episode.bridge.close(ids)
    except Exception:  # a broken bridge: the turn stays as sampled
        closing = []
    row._add(closing, sampled=False)
    row.turns += 1
    traj.rewards.append(0.0)
    traj.logprobs_given = traj.logprobs_given and logprobs is not None
    traj.messages.append({"role": "assistant", "content": text})
    traj.stop_reason = _failure(exc)
    info = {"error": _describe(exc), "stop_reason": traj.stop_reason, "text": text}
    return row.ids, 0.0, False, True, info


class TokenBatch:
    """:class:`AsyncTokenBatch` with blocking ``reset``, ``step``, ``end`` and ``close``,
    run on a private event loop (its episodes' I/O still overlaps). Takes
    ``AsyncTokenBatch``'s arguments but ``backends`` (it keeps its own)."""

    def __init__(self, tokenizer: Any, **kwargs: Any) -> None:
        if "backends" in kwargs:
            raise TypeError("TokenBatch keeps its own backends (on its own event loop); "
                            "use AsyncTokenBatch to share them")
        self._runtime = Runtime(f"ors-token-batch-{id(self):x}")
        self.batch = AsyncTokenBatch(tokenizer, **kwargs)
        self._finalizer = weakref.finalize(
            self, _cleanup.schedule, partial(_release, self._runtime, self.batch))

    def __len__(self) -> int:
        return len(self.batch)

    @property
    def trajectories(self) -> list[Trajectory]:
        return self.batch.trajectories

    @property
    def running(self) -> list[int]:
        return self.batch.running

    @property
    def backends(self) -> Backends:
        return self.batch.backends

    def reset(self, rows: Sequence[EpisodeRow | Mapping[str, Any]]
              ) -> tuple[list[list[int]], list[dict[str, Any]]]:
        """``AsyncTokenBatch.reset``, blocking."""
        return self._runtime.run(self.batch.reset(rows))

    def step(self, actions: Sequence[Any]) -> Results:
        """``AsyncTokenBatch.step``, blocking."""
        return self._runtime.run(self.batch.step(actions))

    def end(self, reason: str | None = None, *, episodes: Sequence[int] | None = None) -> None:
        """``AsyncTokenBatch.end``, blocking."""
        self._runtime.run(self.batch.end(reason, episodes=episodes))

    def close(self) -> None:
        """End the open episodes, close the backends and the event loop; safe twice."""
        self._finalizer.detach()
        _release(self._runtime, self.batch)

    def __enter__(self) -> TokenBatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _release(runtime: Runtime, batch: AsyncTokenBatch) -> None:
    runtime.close(batch.close())
