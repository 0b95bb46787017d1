"""``OrsSpec.rollout_func``: each dataset row's task as a ``TokenEnv`` episode.

TRL calls a rollout function with the prompts of a batch (each row repeated
``num_generations`` times by its sampler) and the trainer. Each prompt names
its task (``OrsSpec.train_dataset`` puts the env id and task index in the user
turn); each becomes one episode, and all episodes sample one turn at a time
in one batch until every one has ended or used up ``max_completion_length``.
What the trainer trains on is the trajectory's own record: the sampled ids
verbatim, the environment's ids between turns (``env_mask`` 0) and the
sampler's logprobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from ors_gym.trl._sample import lockstep, more_anywhere, sample, tokenizer_of

__all__ = ["RETURN_FIELD", "TASK_ENV", "TASK_INDEX", "TRAJECTORY_FIELD", "TokenRollouts"]

#: Keys of a dataset prompt's user turn naming its task.
TASK_ENV, TASK_INDEX = "ors_env_id", "ors_task_index"
#: The extra fields carrying each episode's return and ``Trajectory`` to the reward functions.
RETURN_FIELD, TRAJECTORY_FIELD = "ors_return", "ors_trajectory"


class TokenRollouts:
    """The rollout function: a pool of ``TokenEnv`` per env id, reused across calls."""

    def __init__(
        self,
        env_kwargs: Mapping[str, Mapping[str, Any]],
        split: str,
        token_kwargs: Mapping[str, Any],
    ) -> None:
        self._env_kwargs = {k: dict(v) for k, v in env_kwargs.items()}
        self._split = split
        self._token_kwargs = dict(token_kwargs)
        self._pool: dict[str, list[Any]] = {}
        self._tokenizer: Any = None
        self._limit: int | None = None

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        tasks = [self._task_of(p) for p in prompts]
        limit = int(trainer.args.max_completion_length)
        tokenizer = tokenizer_of(trainer)
        if tokenizer is not self._tokenizer or limit != self._limit:
            self.close()
            self._tokenizer, self._limit = tokenizer, limit
        envs = self._take(tasks, trainer)
        episodes = _run(envs, tasks, self._split, trainer, limit)
        out: dict[str, list[Any]] = {
            "prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
            RETURN_FIELD: [], TRAJECTORY_FIELD: []}
        for env in episodes:
            trajectory = env.trajectory  # a reset makes a new one: this record stays as it is
            fields = trajectory.to_trl(_trained_row(trajectory))
            for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
                out[key].append(fields[key])
            out[RETURN_FIELD].append(trajectory.reward)
            out[TRAJECTORY_FIELD].append(trajectory)
        return out

    def close(self) -> None:
        """Close every pooled environment (their sessions end)."""
        for envs in self._pool.values():
            for env in envs:
                env.close()
        self._pool.clear()

    # -- internals -------------------------------------------------------------------
    def _task_of(self, prompt: Any) -> tuple[str, int]:
        turn = prompt[-1] if isinstance(prompt, Sequence) and prompt else None
        if not isinstance(turn, Mapping) or turn.get(TASK_ENV) is None or turn.get(
                TASK_INDEX) is None:
            raise ValueError(
                f"a prompt does not name its task (no {TASK_ENV!r} and {TASK_INDEX!r} in its "
                "user turn): give GRPOTrainer OrsSpec.train_dataset, or rows built like it")
        env_id = str(turn[TASK_ENV])
        if env_id not in self._env_kwargs:
            raise ValueError(
                f"a prompt names {env_id!r}, which is not an id of this OrsSpec "
                f"({sorted(self._env_kwargs)})")
        return env_id, int(turn[TASK_INDEX])

    def _take(self, tasks: Sequence[tuple[str, int]], trainer: Any) -> list[Any]:
        """One pooled ``TokenEnv`` per task, making more when this batch needs them."""
        from ors_gym.tokens import TokenEnv

        handed: dict[str, int] = {}
        envs = []
        for env_id, _ in tasks:
            pool = self._pool.setdefault(env_id, [])
            k = handed.get(env_id, 0)
            if k == len(pool):
                made = gym.make(env_id, **self._env_kwargs[env_id])
                options = {"max_tokens": self._limit, **self._token_kwargs}
                template = trainer.args.chat_template_kwargs
                if template and "chat_template_kwargs" not in options:
                    options["chat_template_kwargs"] = dict(template)
                pool.append(TokenEnv(made, self._tokenizer, **options))
            handed[env_id] = k + 1
            envs.append(pool[k])
        return envs


def _trained_row(trajectory: Any) -> int:
    """The row TRL trains on: the last with sampled ids (a template that rewrites history
    splits an episode into rows, and the last may have started with no turn left)."""
    rows = trajectory.rows
    return max((k for k, r in enumerate(rows) if r.completion_ids), default=len(rows) - 1)


def _run(envs: list[Any], tasks: Sequence[tuple[str, int]], split: str, trainer: Any,
         limit: int) -> list[Any]:
    """Reset every episode, then sample one turn for all running ones until none runs."""
    ids: list[list[int]] = []
    for env, (_, index) in zip(envs, tasks, strict=True):
        first, _ = env.reset(options={"index": index, "split": split})
        ids.append(list(first))
    running = list(range(len(envs)))
    together = lockstep(trainer)
    while True:
        # every row counts, so an episode whose template keeps starting rows still ends
        used = {i: sum(len(r.completion_ids) for r in envs[i].trajectory.rows) for i in running}
        running = [i for i in running if used[i] < limit]
        if together:
            # vLLM gathers every process's prompts and slices its answer by equal shares:
            # every process sends all its episodes until none runs anywhere
            if not more_anywhere(trainer, bool(running)):
                break
            batch = list(range(len(envs)))
        elif running:
            batch = running
        else:
            break
        budgets = [max(1, limit - used[i]) if i in used else 1 for i in batch]
        sampled = sample(trainer, [ids[i] for i in batch], budgets)
        still = []
        for i, (new, logprobs) in zip(batch, sampled, strict=True):
            if i not in used or used[i] >= limit:
                continue
            step = envs[i].step({"ids": new, "logprobs": logprobs})
            ids[i] = list(step[0])
            if not (step[2] or step[3]):
                still.append(i)
        running = still
    return envs
