"""Token-in/token-out sampling: a prompt's ids to a model, its completion's ids back.

``TokenSampler`` is the one sampler protocol: the gateway, the asynchronous worker
and the lockstep driver (TRL's ``rollout_func``, SkyRL's ``generate``, veRL's agent
loop) all take one. The samplers: ``VllmCompletions`` (vLLM's ``/v1/completions``)
and ``SglangGenerate`` (SGLang's ``/generate``) over HTTP, ``TransformersSampler`` (a
local ``transformers`` model, for small runs). ``sample_all`` samples a turn's
prompts together.
"""

from __future__ import annotations

from ors_gym.sampling._http import SglangGenerate, VllmCompletions
from ors_gym.sampling._local import TransformersSampler
from ors_gym.sampling._protocol import (
    FinishReason,
    Sample,
    SamplingError,
    TokenSampler,
    sample_all,
)

__all__ = [
    "FinishReason",
    "Sample",
    "SamplingError",
    "SglangGenerate",
    "TokenSampler",
    "TransformersSampler",
    "VllmCompletions",
    "sample_all",
]
