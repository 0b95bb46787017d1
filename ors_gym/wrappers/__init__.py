"""Wrappers that give ORS environments the fixed spaces Stable-Baselines3 accepts.

- ``DiscreteToolActions``: a ``Discrete`` action per enumerable tool call.
- ``ImageObservation``: the observation's image as a fixed-size ``uint8`` Box.
- ``TextVector``: the observation's text as a feature-hashed ``float32`` vector.
- ``MetadataVector``: named numbers from tool metadata / block detail as a ``float32`` Box.
- ``Conversation``: the whole conversation so far as the observation (OpenAI/Anthropic/ORS).
- ``RecordTrajectories``: each episode written as a JSON line, loss-free (the format and
  its reader, ``read_trajectories``, are in :mod:`ors_gym.trajectories`).

Typical use::

    env = MetadataVector(DiscreteToolActions(gym.make("ors/GridWorld-v0")),
                         keys={"agent": 2, "goal": 2}, low=0, high=4, normalize=True)
"""

from __future__ import annotations

import warnings
from typing import Any

from ors_gym.wrappers.actions import DiscreteToolActions, NotEnumerableError, enumerate_tool_calls
from ors_gym.wrappers.conversation import Conversation, ConversationSpace
from ors_gym.wrappers.observations import (
    ImageObservation,
    MetadataVector,
    MissingValueError,
    TextVector,
    hash_text,
)
from ors_gym.wrappers.recording import RecordTrajectories

#: Names that moved to :mod:`ors_gym.trajectories`; still importable from here, with a
#: ``DeprecationWarning``, for one release.
_MOVED = frozenset({"read_trajectories", "trajectory_messages"})


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import ors_gym.trajectories as trajectories

        warnings.warn(
            f"ors_gym.wrappers.{name} moved to ors_gym.trajectories.{name}; "
            "import it from there (the old path goes away in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(trajectories, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Conversation",
    "ConversationSpace",
    "DiscreteToolActions",
    "ImageObservation",
    "MetadataVector",
    "MissingValueError",
    "NotEnumerableError",
    "RecordTrajectories",
    "TextVector",
    "enumerate_tool_calls",
    "hash_text",
]
