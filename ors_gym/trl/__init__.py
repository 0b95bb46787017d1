"""Train language-model agents on any ORS environment with TRL's GRPO trainers.

``OrsSpec(env_ids)`` gives ``train_dataset``, ``environment_factory`` and
``reward_funcs`` for ``GRPOTrainer`` and ``AsyncGRPOTrainer``; ``ors_reward`` is
that reward function, ``RewardPart`` a column per named reward part, and
``OrsRollout`` the base of the per-rollout environment classes (which own their
reward through ``get_reward``). Needs the
``trl`` extra (``pip install 'ors-gym[trl]'``) to train; this module itself
imports neither TRL nor torch.
"""

from __future__ import annotations

from ors_gym.trl._rewards import RewardPart, ors_reward
from ors_gym.trl._rollout import ENDED_TEXT, OrsRollout
from ors_gym.trl._spec import OrsSpec

__all__ = ["ENDED_TEXT", "OrsRollout", "OrsSpec", "RewardPart", "ors_reward"]
