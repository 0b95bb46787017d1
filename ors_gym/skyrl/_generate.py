"""A SkyRL generator's batch of ORS episodes at the token level, over one ``AsyncTokenBatch``.

SkyRL's generator hands its prompts (here: dataset rows naming each task, as
``ors_gym.skyrl.rows`` builds them) to an inference engine turn by turn and returns
a ``GeneratorOutput``. :func:`generate` plays that part for ORS environments: every
row's episode is reset at once, each turn the running episodes' prompts go to
``sample`` together, their steps run at once, and each finished episode's session
is given back as it ends; the trajectories come back as ``generator_output``'s batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ors_gym.skyrl._batch import generator_output
from ors_gym.tokens import AsyncTokenBatch, EnvPool, is_processor

__all__ = ["Sample", "generate"]

#: ``sample(prompts, budgets)``: one completion per prompt, ``(ids, logprobs or None)``,
#: at most ``budgets[i]`` ids, as a list or awaited (an inference engine's ``generate``).
Sample = Callable[[list[list[int]], list[int]], Any]


async def generate(
    rows: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    sample: Sample,
    *,
    max_tokens: int,
    step_wise: bool = False,
    pool: EnvPool | None = None,
    **token_kwargs: Any,
) -> dict[str, Any]:
    """Play one episode per dataset row (``env_id``, ``split``, ``index``, and optional
    ``env_kwargs``) with ``sample`` and return SkyRL's ``GeneratorOutput`` fields.

    ``max_tokens`` caps each episode's ids after its first prompt (SkyRL's
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
        try:
            prompts, _ = await batch.reset(list(rows))
            ids = [list(p) for p in prompts]
            while running := batch.running:
                used = {k: len(batch.trajectories[k].completion_ids) for k in running}
                sampled = sample([ids[k] for k in running],
                                 [max(1, max_tokens - used[k]) for k in running])
                if inspect.isawaitable(sampled):
                    sampled = await sampled
                actions: list[Any] = [None] * len(ids)
                for k, (new, logprobs) in zip(running, sampled, strict=True):
                    actions[k] = {"ids": list(new), "logprobs": logprobs}
                observations, *_ = await batch.step(actions)
                ids = [list(o) for o in observations]
        finally:
            await batch.end()
        return generator_output(batch.trajectories, step_wise=step_wise)
