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
