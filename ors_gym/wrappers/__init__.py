"""Wrappers that give ORS environments the fixed spaces Stable-Baselines3 accepts.

- ``DiscreteToolActions``: a ``Discrete`` action per enumerable tool call.
- ``ImageObservation``: the observation's image as a fixed-size ``uint8`` Box.
- ``TextVector``: the observation's text as a feature-hashed ``float32`` vector.
- ``MetadataVector``: named numbers from tool metadata / block detail as a ``float32`` Box.

Typical use::

    env = MetadataVector(DiscreteToolActions(gym.make("ors/GridWorld-v0")),
                         keys={"agent": 2, "goal": 2}, low=0, high=4, normalize=True)
"""

from __future__ import annotations

from ors_gym.wrappers.actions import DiscreteToolActions, enumerate_tool_calls
from ors_gym.wrappers.observations import (
    ImageObservation,
    MetadataVector,
    MissingValueError,
    TextVector,
    hash_text,
)

__all__ = [
    "DiscreteToolActions",
    "ImageObservation",
    "MetadataVector",
    "MissingValueError",
    "TextVector",
    "enumerate_tool_calls",
    "hash_text",
]
