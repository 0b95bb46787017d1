"""Any ORS environment as a verifiers (PrimeIntellect) taskset, for ``vf-eval`` and prime-rl.

``vf-eval ors-gym-verifiers --env.taskset.base-url URL`` evaluates an environment
served by ``ors-gym serve`` (or any ORS server, or a hosted ``--env.taskset.deployment``)
over HTTP. verifiers cannot share a Python environment with the ``openreward`` SDK,
so this module needs only ors_gym's base install (``pip install 'ors-gym[verifiers]'``).
"""

from __future__ import annotations

from ors_gym.verifiers.config import OrsTaskConfig, OrsTasksetConfig, OrsToolsetConfig
from ors_gym.verifiers.state import OrsConnection, OrsState
from ors_gym.verifiers.task import OrsTask, OrsTaskData
from ors_gym.verifiers.taskset import (
    OrsHarness,
    OrsSingleAgentEnv,
    OrsSingleAgentEnvConfig,
    OrsTaskset,
)
from ors_gym.verifiers.toolset import OrsToolset

__all__ = [
    "OrsConnection",
    "OrsHarness",
    "OrsSingleAgentEnv",
    "OrsSingleAgentEnvConfig",
    "OrsState",
    "OrsTask",
    "OrsTaskConfig",
    "OrsTaskData",
    "OrsTaskset",
    "OrsTasksetConfig",
    "OrsToolset",
    "OrsToolsetConfig",
]
