"""Which ORS episode a veRL dataset row names, and the rows that name them.

veRL hands an agent loop each row's columns as keyword arguments; its
``RLHFDataset`` keeps ``extra_info`` (a dict) and reads ``extra_info.index``
as the sample's index. The task is named there: ``env_id`` (a
``gymnasium.make`` id), ``split``, ``index`` (or ``task_index``) or
``task_spec``, and ``env_kwargs`` for the env; a top-level column of the same
name wins over ``extra_info``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_gym.async_env import AsyncOrsEnv
from ors_gym.platform import dataset_indices
from ors_gym.registration import async_env_arguments, task_count

__all__ = ["EpisodeRow", "rows"]


@dataclass(frozen=True)
class EpisodeRow:
    """One row's episode: the env id, its ``make`` keyword arguments and reset options."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], **defaults: Any) -> EpisodeRow:
        """Read a row's columns (``extra_info`` first, then the top level over it);
        ``defaults`` are ``env_kwargs`` under the row's own."""
        extra = row.get("extra_info")
        merged: dict[str, Any] = dict(extra) if isinstance(extra, Mapping) else {}
        merged.update({k: v for k, v in row.items() if k != "extra_info" and v is not None})
        env_id = merged.get("env_id")
        if not env_id:
            raise ValueError(
                "the 'ors' agent loop needs the row's env_id (a gymnasium.make id such as "
                "'ors/QA-v0') in extra_info or a column of its own; ors_gym.verl.rows(env_id) "
                "builds such rows"
            )
        options: dict[str, Any] = {}
        index = merged.get("task_index", merged.get("index"))
        if merged.get("task_spec") is not None:
            options["task_spec"] = dict(merged["task_spec"])
        elif index is not None:
            options["index"] = int(index)
        if merged.get("split") is not None:
            options["split"] = str(merged["split"])
        kwargs = {**defaults, **dict(merged.get("env_kwargs") or {})}
        seed = merged.get("seed")
        return cls(str(env_id), kwargs, options, None if seed is None else int(seed))

    def make(self) -> AsyncOrsEnv:
        """An ``AsyncOrsEnv`` for this row: the registered id's arguments, then the row's."""
        return AsyncOrsEnv(**async_env_arguments(self.env_id, self.env_kwargs))


def rows(
    env_id: str,
    *,
    split: str = "train",
    num_tasks: int | None = None,
    data_source: str | None = None,
    agent_name: str = "ors",
    **env_kwargs: Any,
) -> list[dict[str, Any]]:
    """veRL dataset rows, one per task of ``split`` (the first ``num_tasks``): ``prompt``
    (one empty user turn: the agent loop renders the task's own), ``data_source``,
    ``agent_name`` and ``extra_info`` naming the task (``env_id``, ``split``, ``index``,
    ``env_kwargs``). Save them as parquet for ``data.train_files``."""
    count = task_count(env_id, split, env_kwargs, num_tasks)
    info: dict[str, Any] = {"env_id": env_id, "split": split}
    if env_kwargs:
        info["env_kwargs"] = dict(env_kwargs)
    return [
        {
            "prompt": [{"role": "user", "content": ""}],
            "data_source": data_source or env_id,
            "agent_name": agent_name,
            "extra_info": {**info, "index": i},
        }
        for i in dataset_indices(count, env_kwargs)  # task_weights, if given
    ]
