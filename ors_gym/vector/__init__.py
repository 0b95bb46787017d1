"""Vector environments over ORS sessions.

``OrsVectorEnv`` steps N sessions of one environment concurrently on one event
loop; ``make_env_fns`` gives picklable constructors for gymnasium's own
``SyncVectorEnv`` / ``AsyncVectorEnv`` over ``OrsEnv``.
"""

from ors_gym.vector.env import OrsVectorEnv
from ors_gym.vector.env_fns import EnvFn, make_env_fns

__all__ = ["EnvFn", "OrsVectorEnv", "make_env_fns"]
