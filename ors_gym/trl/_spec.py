"""``OrsSpec``: any ORS environment as TRL's dataset, environment factory and reward.

Shaped like TRL's ``trl.experimental.openreward.OpenRewardSpec``: build one,
then pass ``.train_dataset``, ``.environment_factory`` and ``.reward_funcs`` to
``GRPOTrainer`` or ``AsyncGRPOTrainer``. Any ``gymnasium.make`` id works
(bundled environments hosted in-process, registered classes, remote servers,
hosted deployments); a list of ids gives TRL's multi-environment form (a dict
of factories, and an ``environment`` column naming each row's id).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

import gymnasium as gym

from ors_gym.env import OrsEnv
from ors_gym.errors import OrsDependencyError
from ors_gym.platform import dataset_indices
from ors_gym.protocol import ToolSpec
from ors_gym.trl._classes import rollout_class
from ors_gym.trl._rewards import RewardPart, ors_reward
from ors_gym.trl._rollout import OrsRollout
from ors_gym.trl._token_rollout import TASK_ENV, TASK_INDEX, TokenRollouts

__all__ = ["OrsSpec"]


class OrsSpec:
    """ORS environments for TRL's ``GRPOTrainer`` and ``AsyncGRPOTrainer``.

    ``env_ids``: one ``gymnasium.make`` id (``"ors/QA-v0"``) or several (a mixed
    run), or a mapping of ids to their own ``make`` keyword arguments.
    ``split``: the split tasks come from; ``num_tasks`` (the first N) or
    ``indices`` (these) choose the rows, else every task of the split.
    ``multimodal``: give images to the model as TRL image parts (a vision
    model), instead of a note saying they were not shown.
    ``token_kwargs``: passed to ``TokenEnv`` by ``rollout_func`` (``renderer``...).
    ``reward_parts``: names of the reward parts the environments return
    (``ToolOutput.metadata["reward_parts"]``): ``reward_funcs`` is then one
    column per part, in this order, for TRL's ``reward_weights``.
    ``terminal_as_tool``: offer the terminal tool to the model as a tool, rather
    than grading its final plain reply (``AsyncGRPOTrainer``'s loop never shows
    the environment that reply).
    ``env_kwargs``: passed to ``gymnasium.make`` for every id (``base_url``,
    ``deployment``, ``toolset``, ``max_steps``...).
    """

    def __init__(
        self,
        env_ids: str | Sequence[str] | Mapping[str, Mapping[str, Any]],
        *,
        split: str = "train",
        num_tasks: int | None = None,
        indices: Sequence[int] | None = None,
        multimodal: bool = False,
        token_kwargs: Mapping[str, Any] | None = None,
        reward_parts: Sequence[str] | None = None,
        terminal_as_tool: bool = False,
        **env_kwargs: Any,
    ) -> None:
        if num_tasks is not None and indices is not None:
            raise ValueError("pass num_tasks or indices, not both")
        if num_tasks is not None and num_tasks < 1:
            raise ValueError(f"num_tasks must be at least 1, got {num_tasks}")
        if isinstance(env_ids, str):
            ids: dict[str, dict[str, Any]] = {env_ids: {}}
            self._multi = False
        elif isinstance(env_ids, Mapping):
            ids = {str(k): dict(v or {}) for k, v in env_ids.items()}
            self._multi = True
        else:
            ids = {str(k): {} for k in env_ids}
            self._multi = True
        if isinstance(reward_parts, str):
            raise TypeError(f"reward_parts takes a list of names, got the string {reward_parts!r}")
        self._parts = [RewardPart(p) for p in reward_parts or []]
        if len({p.part for p in self._parts}) != len(self._parts):
            raise ValueError(f"reward_parts names a part twice: {list(reward_parts or [])}")
        self._terminal_as_tool = bool(terminal_as_tool)
        if not ids:
            raise ValueError("env_ids is empty: give at least one environment id, e.g. 'ors/QA-v0'")
        self.env_ids = list(ids)
        self.split = split
        self._num_tasks = num_tasks
        self._indices = None if indices is None else [int(i) for i in indices]
        self._multimodal = multimodal
        self._kwargs = {k: {**env_kwargs, **v} for k, v in ids.items()}
        self._classes: dict[str, type[OrsRollout]] = {}
        self._rows: dict[str, list[int]] = {}
        self._token_kwargs = dict(token_kwargs or {})
        self._token_rollouts: TokenRollouts | None = None
        for env_id in self.env_ids:
            self._discover(env_id)

    @cached_property
    def train_dataset(self) -> Any:
        """A ``datasets.Dataset``: ``prompt``, ``task_index`` and, for several ids, ``environment``.

        ``prompt`` is one empty user turn (``reset`` fills it in) that also names the
        row's task, as ``ors_env_id`` and ``ors_task_index`` keys of the message:
        TRL hands a ``rollout_func`` the prompts alone, and chat templates ignore
        keys they do not know.
        """
        try:
            from datasets import Dataset
        except ImportError as exc:
            raise OrsDependencyError(
                "OrsSpec.train_dataset needs the datasets package: pip install 'ors-gym[trl]'"
            ) from exc
        columns: dict[str, list[Any]] = {"prompt": [], "task_index": []}
        if self._multi:
            columns["environment"] = []
        for env_id, rows in self._rows.items():
            for index in rows:
                columns["prompt"].append([{
                    "role": "user", "content": "", TASK_ENV: env_id, TASK_INDEX: index}])
                columns["task_index"].append(index)
                if self._multi:
                    columns["environment"].append(env_id)
        return Dataset.from_dict(columns)

    @property
    def environment_factory(
        self,
    ) -> Callable[[], OrsRollout] | dict[str, Callable[[], OrsRollout]]:
        """A class per id (called with no argument, it makes a rollout); a dict of them for
        several ids, keyed like the dataset's ``environment`` column."""
        if self._multi:
            return dict(self._classes)
        return self._classes[self.env_ids[0]]

    @property
    def rollout_func(self) -> Callable[[list[Any], Any], dict[str, list[Any]]]:
        """For ``GRPOTrainer(rollout_func=...)``: each row's task run as a token episode.

        Every prompt TRL hands over (each row repeated ``num_generations`` times)
        becomes one ``TokenEnv`` episode, sampled turn by turn the way the trainer
        samples (its vLLM, else its own model; its temperature, top-p, top-k and
        ``max_completion_length``), with the sampled tokens' logprobs. It returns
        TRL's ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask``,
        plus ``ors_return`` (each episode's return) for ``ors_reward``.
        """
        if self._token_rollouts is None:
            self._token_rollouts = TokenRollouts(
                {k: dict(v) for k, v in self._kwargs.items()}, self.split, self._token_kwargs)
        return self._token_rollouts

    @property
    def reward_funcs(
        self,
    ) -> Callable[..., list[float | None]] | list[Callable[..., list[float | None]]]:
        """``ors_reward`` (the episode's return, after the terminal-tool rule), or
        with ``reward_parts`` one ``RewardPart`` column per part.

        Under ``AsyncGRPOTrainer`` these give None: each environment's
        ``get_reward`` column carries the return there (leave them out).
        """
        if self._parts:
            return list(self._parts)
        return ors_reward

    def __repr__(self) -> str:
        return f"OrsSpec({self.env_ids!r}, split={self.split!r})"

    # -- discovery -------------------------------------------------------------------
    def _discover(self, env_id: str) -> None:
        """Ask the environment once for its tasks and tools (one session, for task tools)."""
        kwargs = self._kwargs[env_id]
        made = gym.make(env_id, **kwargs)
        try:
            env = made.unwrapped
            if not isinstance(env, OrsEnv):
                raise TypeError(f"{env_id!r} is not an ORS environment id (it made {env!r})")
            count = env.num_tasks(self.split)
            rows = self._choose_rows(env_id, count)
            listed = env.class_tools
            tools: dict[str, ToolSpec] = {t.name: t for t in listed.tools}
            terminal = listed.terminal_tool
            if rows:
                env.reset(options={"index": rows[0], "split": self.split})
                session = env.tools
                terminal = session.terminal_tool or terminal
                for t in session.tools:
                    tools.setdefault(t.name, t)
        finally:
            made.close()
        self._rows[env_id] = rows
        self._classes[env_id] = rollout_class(
            env_id, list(tools.values()), terminal, kwargs, self._multimodal, self.split,
            terminal_as_tool=self._terminal_as_tool,
        )

    def _choose_rows(self, env_id: str, count: int) -> list[int]:
        if self._indices is not None:
            bad = [i for i in self._indices if not 0 <= i < count]
            if bad:
                raise ValueError(
                    f"indices {bad} are out of range for {env_id!r} split {self.split!r}, "
                    f"which has {count} tasks (0 to {count - 1})"
                )
            return list(self._indices)
        first = count if self._num_tasks is None else min(self._num_tasks, count)
        return dataset_indices(first, self._kwargs[env_id])  # drawn by task_weights, if given
