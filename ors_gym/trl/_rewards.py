"""TRL reward functions over ORS episodes: the return (``ors_reward``) and its named parts.

TRL calls a reward function with the batch's completions and the dataset's
other columns; ``GRPOTrainer`` adds ``environments`` (the rollouts' instances)
and a ``rollout_func`` run adds the fields it returned (``ors_return``,
``ors_trajectory``). ``AsyncGRPOTrainer`` passes neither: there each
environment owns its reward through ``OrsRollout.get_reward``, and these
functions give None. A function that returns an episode's return (or a part
of it) marks it counted, so ``get_reward`` then gives None: TRL sums every
column, and no return is counted twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ors_gym.trl._rollout import OrsRollout

__all__ = ["RewardPart", "ors_reward"]

logger = logging.getLogger("ors_gym")
_warned: set[str] = set()


def _warn_once(name: str) -> None:
    if name in _warned:
        return
    _warned.add(name)
    logger.warning(
        "ors_gym.trl: reward function %s got neither TRL's environments nor a rollout_func's "
        "fields (AsyncGRPOTrainer calls it so): it gives None, and each environment's own "
        "reward column (OrsRollout.get_reward) carries the episode's return", name)


def ors_reward(
    completions: Sequence[Any],
    environments: Sequence[Any] | None = None,
    ors_return: Sequence[float | None] | None = None,
    **_: Any,
) -> list[float | None]:
    """TRL reward function: each rollout's episode return, from its environment.

    With ``environment_factory`` under ``GRPOTrainer`` (TRL passes
    ``environments``): an episode the model left unfinished whose environment
    has a terminal tool is graded first, its final assistant message going to
    that tool; rollouts of other environments get None (TRL ignores them). With
    ``OrsSpec.rollout_func``: the returns the token episodes ended with, handed
    over as the ``ors_return`` field. With neither (``AsyncGRPOTrainer``): None,
    with a WARNING once, as the environments' ``get_reward`` column carries the return.
    """
    if environments is None:
        if ors_return is not None:
            if len(ors_return) != len(completions):
                raise ValueError(
                    f"ors_return has {len(ors_return)} values for {len(completions)} completions"
                )
            return [None if r is None else float(r) for r in ors_return]
        _warn_once("ors_reward")
        return [None] * len(completions)
    return [
        env._grade(completion) if isinstance(env, OrsRollout) else None
        for completion, env in zip(completions, environments, strict=True)
    ]


class RewardPart:
    """TRL reward function: one named part of each episode's reward (a column of its own).

    An environment returns parts in ``ToolOutput.metadata["reward_parts"]``; the
    column is the part's sum over the episode (0.0 where the episode returned
    none of it), the final reply graded first as ``ors_reward`` does. From a
    ``rollout_func`` run it reads ``Trajectory.reward_parts``. TRL names the
    column ``ors_reward/<part>`` and weighs it with ``reward_weights``.
    """

    def __init__(self, part: str) -> None:
        if not isinstance(part, str) or not part:
            raise ValueError(f"a reward part is named by a non-empty string, got {part!r}")
        self.part = part
        self.__name__ = f"ors_reward/{part}"

    def __call__(
        self,
        completions: Sequence[Any],
        environments: Sequence[Any] | None = None,
        ors_trajectory: Sequence[Any] | None = None,
        **_: Any,
    ) -> list[float | None]:
        if environments is not None:
            out: list[float | None] = []
            for completion, env in zip(completions, environments, strict=True):
                graded = env._grade(completion) if isinstance(env, OrsRollout) else None
                out.append(None if graded is None else env.reward_parts.get(self.part, 0.0))
            return out
        if ors_trajectory is not None:
            return [self._of_trajectory(t) for t in ors_trajectory]
        _warn_once(self.__name__)
        return [None] * len(completions)

    def _of_trajectory(self, trajectory: Any) -> float | None:
        if trajectory is None or getattr(trajectory, "failed", False):
            return None
        parts = getattr(trajectory, "reward_parts", None)
        if parts is None:
            return None
        return float(parts.get(self.part, 0.0))

    def __repr__(self) -> str:
        return f"RewardPart({self.part!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RewardPart) and other.part == self.part

    def __hash__(self) -> int:
        return hash(("RewardPart", self.part))
