"""SDK environments for testing and benchmarking clients: not registered by default.

``Echo`` (large results, slow and counted calls, failures, images) and
``Latency`` (one tool that takes a fixed time) exercise the protocol and a
client's overhead; they are not tasks to train on, so ``import ors_gym``
leaves them out of the gym registry, ``ors-gym list`` and ``ors-gym serve``'s
default set. :func:`register_test_envs` gives them their ids
(``ors/Echo-v0``, ``ors/Latency-v0``); ``ors-gym serve`` serves them by
``module:Class`` (:data:`TEST_ENVS`). Classes are imported on first attribute
access, as in :mod:`ors_gym.envs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ors_gym.backends.local.sdk import lazy_class

if TYPE_CHECKING:
    from ors_gym.envs.testing.echo import Echo
    from ors_gym.envs.testing.latency import Latency

__all__ = ["TEST_ENVS", "Echo", "Latency", "register_test_envs"]

#: Class name -> ``module:Class``, for ``ors-gym serve`` and ``env_class=``.
TEST_ENVS: dict[str, str] = {
    "Echo": "ors_gym.envs.testing.echo:Echo",
    "Latency": "ors_gym.envs.testing.latency:Latency",
}

#: Episode step limits (``TimeLimit`` truncates there).
_MAX_STEPS: dict[str, int] = {"Echo": 64, "Latency": 1000}


def register_test_envs() -> list[str]:
    """Register ``ors/Echo-v0`` and ``ors/Latency-v0`` (hosted in this process); returns the ids.

    Call it once before ``gym.make`` of either id; calling it again re-registers them.
    """
    from ors_gym.registration import register_class

    return [
        register_class(__getattr__(name), max_episode_steps=_MAX_STEPS[name])
        for name in TEST_ENVS
    ]


def __getattr__(name: str) -> Any:
    """Import a test environment class on first access (PEP 562)."""
    return lazy_class(TEST_ENVS, globals(), __name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(TEST_ENVS))
