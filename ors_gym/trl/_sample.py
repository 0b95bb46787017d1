"""One turn of sampling for a batch of token prompts, the way a ``GRPOTrainer`` samples.

With ``use_vllm`` the trainer's own ``vllm_generation`` samples (its weights are
synced by TRL before a ``rollout_func`` runs; its sampling parameters are the
trainer's), and vLLM's processed logprobs of the sampled tokens come back.
Otherwise the trainer's model samples with the trainer's ``generation_config``
(temperature, top-p, top-k, min-p, repetition penalty), and each sampled token's
logprob is read from the processed scores ``generate`` sampled from: the same
quantity vLLM's ``processed_logprobs`` gives, which TRL's transformers path
does not compute.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

__all__ = ["lockstep", "more_anywhere", "sample", "tokenizer_of"]

Sampled = tuple[list[int], list[float | None]]


def tokenizer_of(trainer: Any) -> Any:
    """The trainer's text tokenizer (a processor's ``tokenizer`` for a vision model)."""
    processing = trainer.processing_class
    return getattr(processing, "tokenizer", None) or processing


def lockstep(trainer: Any) -> bool:
    """Whether every process must sample the same number of prompts at each turn (vLLM
    on several processes gathers them all and hands back equal shares)."""
    return bool(getattr(trainer, "use_vllm", False)) and trainer.accelerator.num_processes > 1


def more_anywhere(trainer: Any, here: bool) -> bool:
    """Whether any process still has a running episode."""
    import torch

    flag = torch.tensor([1 if here else 0], device=trainer.accelerator.device)
    return bool(trainer.accelerator.gather(flag).sum().item() > 0)


def sample(trainer: Any, prompts: Sequence[Sequence[int]], budgets: Sequence[int]) -> list[Sampled]:
    """One completion per prompt: its ids (ending at the first end-of-turn id, at most
    ``budgets[i]`` of them) and each id's logprob."""
    if not prompts:
        return []
    if getattr(trainer, "use_vllm", False):
        return _sample_vllm(trainer, prompts, budgets)
    return _sample_model(trainer, prompts, budgets)


def _sample_vllm(
    trainer: Any, prompts: Sequence[Sequence[int]], budgets: Sequence[int]
) -> list[Sampled]:
    generation = trainer.vllm_generation
    saved = generation.max_completion_length
    generation.max_completion_length = max(budgets)  # read at each call, server and colocate
    try:
        _, completion_ids, logprobs, _ = generation.generate(
            prompts=[list(p) for p in prompts], images=None, num_generations=1)
    finally:
        generation.max_completion_length = saved
    out: list[Sampled] = []
    for ids, top, budget in zip(completion_ids, logprobs, budgets, strict=True):
        # vLLM gives each position's top-k; with TRL's logprobs=0 the first is the sampled id
        out.append((list(ids)[:budget], [None if lp[0] is None else float(lp[0])
                                         for lp in top][:budget]))
    return out


def _sample_model(
    trainer: Any, prompts: Sequence[Sequence[int]], budgets: Sequence[int]
) -> list[Sampled]:
    import torch
    from trl.models import unwrap_model_for_generation

    pad = tokenizer_of(trainer).pad_token_id
    device = trainer.accelerator.device
    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts],
                             device=device)
    config = copy.deepcopy(trainer.generation_config)
    config.max_new_tokens = max(budgets)
    config.output_scores = config.return_dict_in_generate = True
    stops = set(trainer.eos_token_ids)
    with (
        unwrap_model_for_generation(
            trainer.model_wrapped, trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            generation_kwargs=trainer.generation_kwargs,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model,
        torch.no_grad(),
    ):
        result = model.generate(input_ids=input_ids, attention_mask=attention,
                                generation_config=config)
    ids = result.sequences[:, width:].cpu()
    scores = torch.stack(result.scores, dim=1).float()
    logprobs = torch.log_softmax(scores, dim=-1).gather(-1, ids.to(scores.device)[..., None])
    logprobs = logprobs.squeeze(-1).cpu()
    out: list[Sampled] = []
    for row, lps, budget in zip(ids.tolist(), logprobs.tolist(), budgets, strict=True):
        end = next((k + 1 for k, t in enumerate(row) if t in stops), len(row))
        end = min(end, budget)
        out.append((row[:end], [float(x) for x in lps[:end]]))
    return out
