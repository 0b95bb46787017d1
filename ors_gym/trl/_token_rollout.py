"""``OrsSpec.rollout_func``: each dataset row's task as an episode of one ``TokenBatch``.

TRL calls a rollout function with the prompts of a batch (each row repeated
``num_generations`` times by its sampler) and the trainer. Each prompt names
its task (``OrsSpec.train_dataset`` puts the env id and task index in the user
turn); each becomes one episode of a ``TokenBatch``, played by the lockstep
driver: all are reset at once, then all sample one turn in one batch (the
trainer's own sampling, ``_sample``) and step at once, until every one has
ended or used up ``max_completion_length``. Every session is given back
before the call returns. An episode the environment failed is handed to the
trainer with ``env_mask`` all 0 and no return (``ors_reward`` gives None), and
so is one whose first prompt leaves the model (``vllm_max_model_length``, or
its config's ``max_position_embeddings``) no room for a completion
(``context_overflow``: never sampled). No later turn samples past the model's
length either: a turn keeps at most what its prompt leaves, and an episode whose
prompt fills the model ends there with ``context_overflow``, ungraded.
What the trainer trains on is the trajectory's own record: the sampled ids
verbatim, the environment's ids between turns (``env_mask`` 0) and the
sampler's logprobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.tokens import EpisodeRow, stops
from ors_gym.tokens.lockstep import run_lockstep
from ors_gym.trl._sample import TrainerSampler, serve_while, tokenizer_of

__all__ = ["RETURN_FIELD", "TASK_ENV", "TASK_INDEX", "TRAJECTORY_FIELD", "TokenRollouts"]

#: Keys of a dataset prompt's user turn naming its task.
TASK_ENV, TASK_INDEX = "ors_env_id", "ors_task_index"
#: The extra fields carrying each episode's return and ``Trajectory`` to the reward functions.
RETURN_FIELD, TRAJECTORY_FIELD = "ors_return", "ors_trajectory"


class TokenRollouts:
    """The rollout function: one ``TokenBatch`` (its backends kept across calls)."""

    def __init__(
        self,
        env_kwargs: Mapping[str, Mapping[str, Any]],
        split: str,
        token_kwargs: Mapping[str, Any],
    ) -> None:
        if token_kwargs.get("processor") is not None:
            raise ValueError(
                "TRL's rollout_func cannot hand images to the trainer: GRPOTrainer trains a "
                "rollout_func's samples with the dataset's images only, so the frames the "
                "model saw would be missing from its forward pass. Drop processor= from "
                "token_kwargs (the model then reads a note per image), or train a vision "
                "model with veRL's 'ors' agent loop; TokenEnv's to_trl() carries a row's "
                "images for a loop of your own"
            )
        self._env_kwargs = {k: dict(v) for k, v in env_kwargs.items()}
        self._split = split
        self._token_kwargs = dict(token_kwargs)
        self._batch: Any = None
        self._tokenizer: Any = None
        self._limit: int | None = None

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        tasks = [self._task_of(p) for p in prompts]
        limit = int(trainer.args.max_completion_length)
        tokenizer = tokenizer_of(trainer)
        if self._batch is None or tokenizer is not self._tokenizer or limit != self._limit:
            self.close()
            self._tokenizer, self._limit = tokenizer, limit
            self._batch = self._make_batch(trainer)
        rows = [EpisodeRow(env_id, self._env_kwargs[env_id],
                           {"index": index, "split": self._split}) for env_id, index in tasks]
        trajectories = _run(self._batch, rows, trainer, limit)
        masked = _masks_truncated(trainer)
        out: dict[str, list[Any]] = {
            "prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
            RETURN_FIELD: [], TRAJECTORY_FIELD: []}
        for trajectory in trajectories:  # a reset makes new ones: these records stay as they are
            fields = trajectory.to_trl(_trained_row(trajectory))
            kind = stops.TRL.get(trajectory.stop_reason or "", "stop")
            # the environment failed, or the first prompt did not fit: nothing to grade
            ungraded = kind == "failed" or trajectory.stop_reason == stops.CONTEXT_OVERFLOW
            if ungraded or (kind == "truncated" and masked):
                # no token is trained on (TRL masks cut completions when asked)
                fields["env_mask"] = [0] * len(fields["env_mask"])
            for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
                out[key].append(fields[key])
            out[RETURN_FIELD].append(None if ungraded else trajectory.reward)
            out[TRAJECTORY_FIELD].append(trajectory)
        return out

    def close(self) -> None:
        """Close the batch: its open sessions end, its backends close."""
        if self._batch is not None:
            self._batch.close()
            self._batch = None

    # -- internals -------------------------------------------------------------------
    def _make_batch(self, trainer: Any) -> Any:
        from ors_gym.tokens import TokenBatch

        options = {"max_tokens": self._limit, **self._token_kwargs}
        template = trainer.args.chat_template_kwargs
        if template and "chat_template_kwargs" not in options:
            options["chat_template_kwargs"] = dict(template)
        return TokenBatch(self._tokenizer, **options)

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


def _trained_row(trajectory: Any) -> int:
    """The row TRL trains on: the last with sampled ids (a template that rewrites history
    splits an episode into rows, and the last may have started with no turn left)."""
    rows = trajectory.rows
    return max((k for k, r in enumerate(rows) if r.completion_ids), default=len(rows) - 1)


def _masks_truncated(trainer: Any) -> bool:
    return bool(getattr(trainer.args, "mask_truncated_completions", False))


def _context_length(trainer: Any) -> tuple[int | None, str]:
    """The longest sequence the trainer's model takes, where the trainer says, and the
    setting's name: vLLM's ``vllm_max_model_length``, else the model config's
    ``max_position_embeddings``."""
    if getattr(trainer, "use_vllm", False):
        given = getattr(trainer.args, "vllm_max_model_length", None)
        if isinstance(given, int) and given > 0:
            return given, "vllm_max_model_length"
    config = getattr(getattr(trainer, "model", None), "config", None)
    found = getattr(config, "max_position_embeddings", None)
    return (found if isinstance(found, int) and found > 0 else None,
            "the model config's max_position_embeddings")


def _run(batch: Any, rows: list[EpisodeRow], trainer: Any, limit: int) -> list[Any]:
    """The lockstep driver over ``batch`` with the trainer's sampling (run on this, the
    trainer's, thread); every session is given back before returning. ``limit`` counts
    every row's sampled ids, so an episode whose template keeps starting rows still
    ends. No turn keeps ids past the model's length (each prompt's budget is what it
    leaves; the trainer's sampling asks the batch's largest and cuts each to its own): an
    episode whose prompt leaves no room for one sampled id ends with ``context_overflow``
    (at once, never sampled, when it is the first prompt)."""
    longest, setting = _context_length(trainer)
    sampler: TrainerSampler | None = None

    def driver(submit: Any) -> Any:
        nonlocal sampler
        sampler = TrainerSampler(trainer, len(rows), submit)
        return run_lockstep(batch.batch, rows, sampler, max_tokens=limit, budget="episode",
                            max_model_len=longest, max_model_len_name=setting)

    trajectories = serve_while(batch.runtime.run, driver)
    assert sampler is not None
    sampler.finish()
    return list(trajectories)
