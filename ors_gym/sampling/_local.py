"""A local transformers model as a token sampler, for small runs without an inference server.

``generate`` runs in a worker thread (the event loop keeps serving other sessions),
one call at a time (a model is not safe to share between threads). Logprobs are the
sampling distribution's (after temperature and top-p), one per sampled id.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from ors_gym.sampling._protocol import FinishReason, Sample

__all__ = ["TransformersSampler"]


class TransformersSampler:
    """``TokenSampler`` over ``model.generate`` (a ``transformers`` causal LM) and its
    ``tokenizer`` (whose pad/eos ids fill in the generation config)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TransformersSampler({type(self.model).__name__})"

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Sample:
        return await asyncio.to_thread(self._generate, list(prompt_ids), max_tokens,
                                       list(stop_token_ids), temperature, top_p, logprobs)

    def _generate(self, prompt: list[int], max_tokens: int, stops: list[int],
                  temperature: float, top_p: float, want_logprobs: bool) -> Sample:
        import torch

        from ors_gym.tokens.stops import cut_at_stop

        eos = stops or [self.tokenizer.eos_token_id]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos[0]
        sampled = temperature > 0
        kwargs: dict[str, Any] = {"do_sample": sampled}
        if sampled:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
        with self._lock, torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt], device=self.model.device),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long,
                                          device=self.model.device),
                max_new_tokens=max_tokens, eos_token_id=eos, pad_token_id=pad,
                output_scores=True, return_dict_in_generate=True, **kwargs)
        ids = [int(t) for t in out.sequences[0, len(prompt):].tolist()]
        ids = cut_at_stop(ids, eos, keep=True)  # generate pads after the end
        lps: list[float] | None = None
        if want_logprobs:
            lps = [float(torch.log_softmax(out.scores[i][0].float(), dim=-1)[t])
                   for i, t in enumerate(ids)]
        finish: FinishReason = "stop" if ids and ids[-1] in eos else "length"
        return Sample(ids=ids, logprobs=lps, finish_reason=finish)

    async def aclose(self) -> None:
        return None
