"""The sampler protocol every token driver takes: a prompt's ids in, a completion's ids out.

A token episode keeps the exact ids the policy sampled, so whoever drives one (the
gateway, the asynchronous worker, the lockstep driver under TRL's ``rollout_func``,
SkyRL's ``generate`` and veRL's agent loop) needs a sampler that takes ids and answers
ids with their logprobs, never text. ``TokenSampler`` is that contract. A sampler whose
model is best given a whole turn's prompts at once (a trainer's ``generate``) may
also define ``sample_batch``, one budget per prompt; :func:`sample_all` uses it,
else it asks ``sample`` for every prompt at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = ["FinishReason", "Sample", "SamplingError", "TokenSampler", "sample_all"]

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class Sample:
    """One completion: its ids verbatim, their logprobs when asked, why it ended, and the
    version of the weights that sampled it when the sampler knows it (recorded per turn)."""

    ids: list[int]
    logprobs: list[float] | None
    finish_reason: FinishReason
    policy_version: int | None = None


class SamplingError(RuntimeError):
    """An inference server refused a request or answered something unreadable."""


@runtime_checkable
class TokenSampler(Protocol):
    """Samples one completion for a prompt given as ids, at most ``max_tokens`` of them,
    ending at the first of ``stop_token_ids`` (kept in the ids)."""

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Sample: ...

    async def aclose(self) -> None: ...


async def sample_all(
    sampler: TokenSampler, prompts: Sequence[Sequence[int]], *, max_tokens: Sequence[int],
    stop_token_ids: Sequence[int] = (), temperature: float = 1.0, top_p: float = 1.0,
    logprobs: bool = True,
) -> list[Sample]:
    """One completion per prompt (``max_tokens[i]`` ids at most), in order: one
    ``sample_batch`` call where the sampler has one, else every ``sample`` at once."""
    if len(max_tokens) != len(prompts):
        raise ValueError(f"max_tokens has {len(max_tokens)} budgets for {len(prompts)} "
                         "prompts: give one per prompt")
    if not prompts:
        return []
    batch = getattr(sampler, "sample_batch", None)
    if batch is not None:
        got = list(await batch(prompts, max_tokens=max_tokens, stop_token_ids=stop_token_ids,
                               temperature=temperature, top_p=top_p, logprobs=logprobs))
        if len(got) != len(prompts):
            raise SamplingError(f"{sampler!r}.sample_batch answered {len(got)} samples for "
                                f"{len(prompts)} prompts")
        return got
    return list(await asyncio.gather(*(
        sampler.sample(p, max_tokens=m, stop_token_ids=stop_token_ids, temperature=temperature,
                       top_p=top_p, logprobs=logprobs)
        for p, m in zip(prompts, max_tokens, strict=True))))
