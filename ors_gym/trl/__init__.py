"""Train language-model agents on any ORS environment with TRL's ``GRPOTrainer``.

``OrsSpec(env_ids)`` gives ``train_dataset``, ``environment_factory`` and
``reward_funcs`` for ``GRPOTrainer``; ``ors_reward`` is that reward function and
``OrsRollout`` the base of the per-rollout environment classes. Needs the
``trl`` extra (``pip install 'ors-gym[trl]'``) to train; this module itself
imports neither TRL nor torch.
"""

from __future__ import annotations

from ors_gym.trl._rollout import ENDED_TEXT, OrsRollout
from ors_gym.trl._spec import OrsSpec, ors_reward

__all__ = ["ENDED_TEXT", "OrsRollout", "OrsSpec", "ors_reward"]
