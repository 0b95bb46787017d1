"""A SkyRL generator's batch of ORS episodes at the token level, over one ``AsyncTokenBatch``.

SkyRL's generator hands its prompts (here: dataset rows naming each task, as
``ors_gym.skyrl.rows`` builds them) to an inference engine turn by turn and returns
a ``GeneratorOutput``. :func:`generate` plays that part for ORS environments with the
lockstep driver: every row's episode is reset at once, each turn the running
episodes' prompts go to the sampler together, their steps run at once, and each
finished episode's session is given back as it ends; the trajectories come back as
``generator_output``'s batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.sampling import TokenSampler
from ors_gym.skyrl._batch import generator_output
from ors_gym.tokens import AsyncTokenBatch, EnvPool, is_processor
from ors_gym.tokens.lockstep import run_lockstep

__all__ = ["generate"]


async def generate(
    rows: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    sampler: TokenSampler,
    *,
    max_tokens: int,
    step_wise: bool = False,
    pool: EnvPool | None = None,
    **token_kwargs: Any,
) -> dict[str, Any]:
    """Play one episode per dataset row (``env_id``, ``split``, ``index``, and optional
    ``env_kwargs``) with ``sampler`` and return SkyRL's ``GeneratorOutput`` fields.

    ``sampler``: an :class:`ors_gym.sampling.TokenSampler` over your inference engine
    (each turn's prompts are asked for together: one ``sample_batch`` call where it has
    one). ``max_tokens`` caps each episode's ids after its first prompt (SkyRL's
    ``max_generate_length``); ``token_kwargs`` are ``TokenEnv``'s (``renderer``,
    ``chat_template_kwargs``...). ``pool`` (default: the batch's own) lets
    several calls on one loop share connections and discovery.
    """
    if token_kwargs.get("processor") is not None or is_processor(tokenizer):
        raise ValueError(
            "SkyRL's GeneratorOutput has no field for images: a processor cannot be used "
            "here; pass the text tokenizer (images then reach the model as a note), or "
            "train a vision model with veRL's 'ors' agent loop"
        )
    async with AsyncTokenBatch(tokenizer, max_tokens=max_tokens, pool=pool,
                               **token_kwargs) as batch:
        trajectories = await run_lockstep(batch, rows, sampler)
        return generator_output(trajectories, step_wise=step_wise)
