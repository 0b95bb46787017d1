"""Train language-model agents on any ORS environment with SkyRL.

``OrsTextEnv`` is a ``skyrl_gym`` ``BaseTextEnv`` over one ORS episode;
``register()`` adds it to SkyRL's registry (``env_class="ors"`` by default) and
``rows(env_id)`` builds the dataset rows naming each task.
``generator_output(trajectories)`` batches token trajectories
(``ors_gym.tokens``) as SkyRL's ``GeneratorOutput``, and ``generate(rows,
tokenizer, sampler, max_tokens=...)`` plays a generator's whole batch of rows at
the token level over one ``AsyncTokenBatch``, for a custom generator.
Needs the ``skyrl`` extra (``pip install 'ors-gym[skyrl]'``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ors_gym.platform import dataset_indices
from ors_gym.registration import task_count
from ors_gym.skyrl._batch import generator_output, skyrl_stop_reason
from ors_gym.skyrl._env import OrsTextEnv, system_prompt
from ors_gym.skyrl._generate import generate

__all__ = [
    "OrsTextEnv", "generate", "generator_output", "register", "rows", "skyrl_stop_reason",
    "system_prompt",
]

ENTRY_POINT = "ors_gym.skyrl:OrsTextEnv"


def register(env_class: str = "ors", **env_kwargs: Any) -> str:
    """Register ``OrsTextEnv`` in SkyRL's registry as ``env_class``; returns the name.

    ``env_kwargs`` reach ``gymnasium.make`` for every episode (``base_url``...).
    Registering the same name again replaces the earlier entry.
    """
    from skyrl_gym.envs import registration

    registration.registry.pop(env_class, None)
    entry: Any = partial(_make, dict(env_kwargs)) if env_kwargs else ENTRY_POINT
    registration.register(id=env_class, entry_point=entry)
    return env_class


def _make(env_kwargs: dict[str, Any], env_config: Any = None, extras: Any = None) -> OrsTextEnv:
    """``OrsTextEnv`` with ``register``'s keyword arguments under the row's own."""
    extras = dict(extras or {})
    extras["env_kwargs"] = {**env_kwargs, **dict(extras.get("env_kwargs") or {})}
    return OrsTextEnv(env_config, extras)


def rows(
    env_id: str,
    *,
    split: str = "train",
    num_tasks: int | None = None,
    env_class: str = "ors",
    **env_kwargs: Any,
) -> list[dict[str, Any]]:
    """Dataset rows for SkyRL: ``prompt`` (empty: ``init`` adds the task's), ``env_class``,
    ``env_id``, ``split`` and ``index``, one per task (the first ``num_tasks``)."""
    count = task_count(env_id, split, env_kwargs, num_tasks)
    return [
        {"prompt": [], "env_class": env_class, "env_id": env_id, "split": split, "index": i}
        for i in dataset_indices(count, env_kwargs)  # task_weights, if given
    ]
