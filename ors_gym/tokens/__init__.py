"""Token-level episodes: the exact ids a trainer trains on, from any ORS environment.

``TokenEnv`` (and its awaited twin ``AsyncTokenEnv``) takes the ids a model
sampled and returns the next prompt's ids: the previous ones, the sampled ids
verbatim, then the environment's reply as the chat template renders it.
``env.trajectory`` is the record (:class:`Trajectory`: ids, mask, logprobs,
messages) with exporters for TRL, veRL and SkyRL. ``TokenBatch`` (and
``AsyncTokenBatch``) runs N episodes together on one loop over an
``EnvPool`` (one backend per environment, opened from ``EpisodeRow`` rows),
in lockstep or free-running (``run_free``: each episode ends and is handed
back on its own, as ``EndedEpisode``); ``filter_stale`` drops trajectories
sampled by too old a policy; ``make_bridge`` is the bridge ``TokenEnv`` chooses for a
tokenizer (or a vision model's processor: ``split_processor``), for code that renders
and parses turns itself (the gateway, trainer workers); ``stops`` is the vocabulary of
stop reasons. Needs a tokenizer
(transformers); the ``tokens`` extra adds the ``renderers`` library.
"""

from __future__ import annotations

from ors_gym.tokens._choose import make_bridge
from ors_gym.tokens._free import EndedEpisode
from ors_gym.tokens._open import EnvPool, EpisodeRow, shared_pool
from ors_gym.tokens._vision import is_processor, split_processor
from ors_gym.tokens.async_env import AsyncTokenEnv
from ors_gym.tokens.batch import AsyncTokenBatch, TokenBatch
from ors_gym.tokens.bridge import Bridge, TemplateBridge
from ors_gym.tokens.env import TokenEnv, TokenSpace
from ors_gym.tokens.trajectory import TokenRow, Trajectory, filter_stale

__all__ = [
    "AsyncTokenBatch",
    "AsyncTokenEnv",
    "Bridge",
    "EndedEpisode",
    "EnvPool",
    "EpisodeRow",
    "TemplateBridge",
    "TokenBatch",
    "TokenEnv",
    "TokenRow",
    "TokenSpace",
    "Trajectory",
    "filter_stale",
    "is_processor",
    "make_bridge",
    "shared_pool",
    "split_processor",
]
