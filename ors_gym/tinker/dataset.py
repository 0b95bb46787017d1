"""ORS environments as tinker-cookbook's RL data: a dataset builder, its batches, its groups.

:class:`OrsDatasetBuilder` is a ``chz`` ``RLDatasetBuilder`` as tinker-cookbook's
recipes write them (``batch_size``, ``group_size``, ``model_name_for_tokenizer``,
``renderer_name``): its dataset holds one :class:`OrsEnvGroupBuilder` per task
of the split, each a group of ``group_size`` attempts at that task. A group
builder holds names and numbers only, so it pickles (tinker-cookbook may send
it to another process); ``make_envs`` makes the renderer and opens its episodes
as ``ors_gym.tokens`` rows over the running event loop's shared pool
(``shared_pool()``: one backend, one connection pool and one ``/tools``
discovery per environment id in the process, made in the worker at first use,
shared by every group). An environment that scores groups
(``supports_score_group``, such as ``ors/Judged-v0``) gives the group's
rewards through ``compute_group_rewards``.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import chz
from tinker_cookbook import renderers
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder
from tinker_cookbook.tokenizer_utils import get_tokenizer

from ors_gym._compat.tinker_cookbook import one_at_a_time
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.backends.base import AsyncBackend
from ors_gym.scoring import ascore_group
from ors_gym.tinker.env import OrsMessageEnv, OrsTinkerEnv
from ors_gym.tokens import EpisodeRow, shared_pool

__all__ = ["OrsDataset", "OrsDatasetBuilder", "OrsEnvGroupBuilder"]

logger = logging.getLogger("ors_gym")


@dataclass
class OrsEnvGroupBuilder(EnvGroupBuilder):
    """``group_size`` episodes of one ORS task (``options``: ``split`` and ``index`` or
    ``task_spec``) of ``env_id`` (made with ``env_kwargs``), rendered by tinker-cookbook's
    ``renderer_name`` over ``get_tokenizer(model_name_for_tokenizer)``.

    ``score_group``: the group's rewards are the environment's ``score_group`` of
    its conversations (then ``step_rewards`` chooses whether the env's own step
    rewards count too). ``failed_parse_reward``, ``context_overflow_reward``,
    ``max_trajectory_tokens`` and ``max_generation_tokens`` are tinker-cookbook's
    ``EnvFromMessageEnv`` options.
    """

    env_id: str
    options: dict[str, Any]
    group_size: int
    model_name_for_tokenizer: str
    renderer_name: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    system_prompt: str | None = None
    score_group: bool = False
    step_rewards: bool = True
    failed_parse_reward: float = 0.0
    context_overflow_reward: float = 0.0
    max_trajectory_tokens: int | None = None
    max_generation_tokens: int | None = None
    _envs: list[OrsTinkerEnv] = field(default_factory=list, init=False, repr=False)
    _renderer: Any = field(default=None, init=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """The configuration only: its episodes and the renderer stay here."""
        state = dict(self.__dict__)
        state.update(_envs=[], _renderer=None)
        return state

    @property
    def backend(self) -> AsyncBackend | None:
        """The backend the group's episodes share with every group of its environment on
        the event loop (None before ``make_envs``)."""
        return self._envs[0].message_env.env.backend if self._envs else None

    async def make_envs(self) -> Sequence[Env]:
        tokenizer = get_tokenizer(self.model_name_for_tokenizer)
        self._renderer = one_at_a_time(
            renderers.get_renderer(
                self.renderer_name, tokenizer, model_name=self.model_name_for_tokenizer
            )
        )
        self._envs = []
        for _ in range(self.group_size):
            message_env = OrsMessageEnv(
                self._ors_env(), self._renderer, options=self.options, seed=self.seed,
                system_prompt=self.system_prompt, step_rewards=self.step_rewards,
            )
            self._envs.append(
                OrsTinkerEnv(
                    self._renderer,
                    message_env,
                    failed_parse_reward=self.failed_parse_reward,
                    terminate_on_parse_error=True,
                    max_trajectory_tokens=self.max_trajectory_tokens,
                    max_generation_tokens=self.max_generation_tokens,
                    context_overflow_reward=self.context_overflow_reward,
                )
            )
        return list(self._envs)

    def _ors_env(self) -> AsyncOrsEnv:
        """An episode's env over the loop's shared backend for ``env_id`` (made, with its
        discovery, by the first episode of the environment in this process); its episodes
        truncate on a failing session (``stop/env_error``, ``stop/rollout_timeout``)."""
        return shared_pool().env(EpisodeRow(self.env_id, self.env_kwargs))

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Env]
    ) -> list[tuple[float, dict[str, float | int]]]:
        """The environment's ``score_group`` of the group's conversations, in a session of
        its own for the task (each episode gave its session back when it ended); else 0."""
        if not self.score_group:
            return [(0.0, {}) for _ in trajectory_group]
        conversations = []
        for env in env_group:
            assert isinstance(env, OrsTinkerEnv)
            history = env.message_env.history
            conversations.append([env.renderer.to_openai_message(m) for m in history])
        scorer = self._ors_env()
        try:
            await scorer.reset(seed=self.seed, options=self.options)
            scores = await ascore_group(scorer, conversations)
        finally:
            await scorer.close()
        return [(float(s), {"ors_group_score": float(s)}) for s in scores]

    async def cleanup(self) -> None:
        """Give back any session still open (the shared backend stays, for the other
        groups); never raises."""
        for env in self._envs:
            try:
                await env.message_env.env.close()
            except Exception as exc:
                logger.warning("closing an ORS episode of %s failed: %s", self.env_id, exc)

    def logging_tags(self) -> list[str]:
        return ["ors", self.env_id]


class OrsDataset(RLDataset):
    """Batches of ``batch_size`` group builders, in the order given."""

    def __init__(self, builders: Sequence[OrsEnvGroupBuilder], batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.builders = list(builders)
        self.batch_size = batch_size

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of a dataset of {len(self)} batches")
        return self.builders[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return math.ceil(len(self.builders) / self.batch_size)


@chz.chz
class OrsDatasetBuilder(RLDatasetBuilder):
    """tinker-cookbook RL data over ORS environments: every task of ``split`` of each of
    ``env_id`` (one ``gymnasium.make`` id or several; ``env_kwargs`` are their ``make``
    arguments: ``base_url``, ``deployment``, ``max_steps``...), the first ``num_tasks``
    of each, shuffled with ``shuffle_seed`` (None: in order), as groups of ``group_size``
    attempts, ``batch_size`` groups a batch. ``test_split``: a test dataset too, one
    attempt per task. ``score_group`` None: an environment's ``score_group`` gives its
    groups' rewards where it supports one. The rest are :class:`OrsEnvGroupBuilder`'s."""

    env_id: str | list[str]
    batch_size: int
    group_size: int
    model_name_for_tokenizer: str
    renderer_name: str
    split: str = "train"
    test_split: str | None = None
    num_tasks: int | None = None
    env_kwargs: dict[str, Any] = chz.field(default_factory=dict)
    shuffle_seed: int | None = 0
    system_prompt: str | None = None
    score_group: bool | None = None
    step_rewards: bool = True
    failed_parse_reward: float = 0.0
    context_overflow_reward: float = 0.0
    max_trajectory_tokens: int | None = None
    max_generation_tokens: int | None = None

    async def __call__(self) -> tuple[OrsDataset, OrsDataset | None]:
        env_ids = [self.env_id] if isinstance(self.env_id, str) else list(self.env_id)
        if not env_ids:
            raise ValueError("OrsDatasetBuilder needs at least one env_id, e.g. 'ors/Math-v0'")
        known = {env_id: await self._survey(env_id) for env_id in env_ids}
        train = self._dataset(known, self.split, self.group_size)
        test = None
        if self.test_split is not None:
            test = self._dataset(known, self.test_split, 1)
        return train, test

    async def _survey(self, env_id: str) -> tuple[dict[str, int], bool]:
        """How many tasks each split wanted has, and whether the env scores groups."""
        env = shared_pool().env(EpisodeRow(env_id, self.env_kwargs))  # its discovery kept
        try:
            tools = await env.discover()
            splits = {s for s in (self.split, self.test_split) if s is not None}
            counts = {s: await env.catalog.num_tasks(s) for s in splits}
        finally:
            await env.close()
        return counts, bool(tools.supports_score_group)

    def _dataset(
        self, known: Mapping[str, tuple[dict[str, int], bool]], split: str, group_size: int
    ) -> OrsDataset:
        builders = []
        for env_id, (counts, scores) in known.items():
            count = counts[split] if self.num_tasks is None else min(counts[split], self.num_tasks)
            use_scores = scores if self.score_group is None else self.score_group
            builders += [
                OrsEnvGroupBuilder(
                    env_id=env_id,
                    options={"split": split, "index": index},
                    group_size=group_size,
                    model_name_for_tokenizer=self.model_name_for_tokenizer,
                    renderer_name=self.renderer_name,
                    env_kwargs=dict(self.env_kwargs),
                    system_prompt=self.system_prompt,
                    score_group=use_scores,
                    step_rewards=self.step_rewards,
                    failed_parse_reward=self.failed_parse_reward,
                    context_overflow_reward=self.context_overflow_reward,
                    max_trajectory_tokens=self.max_trajectory_tokens,
                    max_generation_tokens=self.max_generation_tokens,
                )
                for index in range(count)
            ]
        if self.shuffle_seed is not None:
            random.Random(self.shuffle_seed).shuffle(builders)
        return OrsDataset(builders, self.batch_size)
