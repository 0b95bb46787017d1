"""Which ORS episode a veRL dataset row names, and the rows that name them.

veRL hands an agent loop each row's columns as keyword arguments; its
``RLHFDataset`` keeps ``extra_info`` (a dict) and reads ``extra_info.index``
as the sample's index. The task is named there: ``env_id`` (a
``gymnasium.make`` id), ``split``, ``index`` (or ``task_index``) or
``task_spec``, and ``env_kwargs`` for the env; a top-level column of the same
name wins over ``extra_info``. ``EpisodeRow`` (every trainer bridge's way to
name an episode, ``ors_gym.tokens``) reads them.
"""

from __future__ import annotations

from typing import Any

from ors_gym.platform import dataset_indices
from ors_gym.registration import task_count
from ors_gym.tokens import EpisodeRow

__all__ = ["EpisodeRow", "rows"]


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
