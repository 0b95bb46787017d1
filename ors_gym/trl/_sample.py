"""A ``GRPOTrainer``'s own sampling as a ``TokenSampler``: one turn of a batch of prompts.

With ``use_vllm`` the trainer's own ``vllm_generation`` samples (its weights are
synced by TRL before a ``rollout_func`` runs; its sampling parameters are the
trainer's), and vLLM's processed logprobs of the sampled tokens come back.
Otherwise the trainer's model samples with the trainer's ``generation_config``
(temperature, top-p, top-k, min-p, repetition penalty), and each sampled token's
logprob is read from the processed scores ``generate`` sampled from: the same
quantity vLLM's ``processed_logprobs`` gives, which TRL's transformers path
does not compute.

:class:`TrainerSampler` is that sampling as an :class:`ors_gym.sampling.TokenSampler`
for the lockstep driver, which runs on the token batch's event loop in a thread of its
own (so the loop keeps the sessions alive while the model samples): each turn's call
is handed to the trainer's thread (:func:`serve_while`), whose CUDA device and model
wrappers it was set up with, and awaited. Where vLLM serves
several processes, each process samples as many prompts as it has episodes at every
turn until no process has one running (vLLM gathers every process's prompts and
hands back equal shares).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import queue
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar, cast

from ors_gym.sampling import FinishReason, Sample
from ors_gym.tokens.stops import cut_at_stop

__all__ = ["TrainerSampler", "lockstep", "more_anywhere", "sample", "serve_while", "tokenizer_of"]

Sampled = tuple[list[int], list[float | None]]
_T = TypeVar("_T")
#: A call handed to the trainer's thread (None: no more calls).
_Job = Callable[[], None] | None


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
        kept = cut_at_stop(row, stops, keep=True)[:budget]  # generate pads after the end
        out.append((kept, [float(x) for x in lps[: len(kept)]]))
    return out


class TrainerSampler:
    """The trainer's sampling (:func:`sample`) as a ``TokenSampler`` whose ``sample_batch``
    runs on the trainer's thread: ``submit`` hands it a call (``serve_while``'s queue).
    ``width``: the episodes of this process, what it samples at each turn when vLLM
    serves several processes. Temperature and top-p are the trainer's own."""

    def __init__(self, trainer: Any, width: int, submit: Callable[[_Job], None]) -> None:
        self.trainer, self.width, self._submit = trainer, width, submit
        self.together = lockstep(trainer)
        self._filler = [int(tokenizer_of(trainer).pad_token_id or 0)]

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Sample:
        (got,) = await self.sample_batch([prompt_ids], max_tokens=[max_tokens],
                                         stop_token_ids=stop_token_ids)
        return got

    async def sample_batch(self, prompts: Sequence[Sequence[int]], *,
                           max_tokens: Sequence[int], stop_token_ids: Sequence[int] = (),
                           temperature: float = 1.0, top_p: float = 1.0,
                           logprobs: bool = True) -> list[Sample]:
        done: concurrent.futures.Future[list[Sample]] = concurrent.futures.Future()

        def call() -> None:
            try:
                done.set_result(self._turn(prompts, max_tokens, frozenset(stop_token_ids)))
            except BaseException as exc:  # the trainer's failure: raised in the driver
                done.set_exception(exc)

        self._submit(call)
        return await asyncio.wrap_future(done)

    async def aclose(self) -> None:
        return None

    def finish(self) -> None:
        """On the trainer's thread once this process's episodes have ended: sample filler
        prompts along with the other processes until none has an episode running."""
        while self.together and more_anywhere(self.trainer, False):
            sample(self.trainer, [self._filler] * self.width, [1] * self.width)

    def _turn(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int],
              stop_ids: frozenset[int]) -> list[Sample]:
        n = len(prompts)
        prompts, budgets = list(prompts), list(budgets)
        if self.together:  # every process sends as many prompts at every turn
            more_anywhere(self.trainer, True)
            spare = self.width - len(prompts)
            prompts, budgets = prompts + [self._filler] * spare, budgets + [1] * spare
        out = []
        for ids, lps in sample(self.trainer, prompts, budgets)[:n]:
            finish: FinishReason = "stop" if ids and ids[-1] in stop_ids else "length"
            # vLLM may give None for a logprob it did not compute; recorded as given
            out.append(Sample(ids, cast("list[float]", lps), finish))
        return out


def serve_while(run: Callable[[Coroutine[Any, Any, _T]], _T],
                driver: Callable[[Callable[[_Job], None]], Coroutine[Any, Any, _T]]) -> _T:
    """Run ``driver(submit)`` with ``run`` (a runtime's) in a thread of its own while this
    thread runs the calls it submits, in order; its result, or its exception raised."""
    calls: queue.SimpleQueue[_Job] = queue.SimpleQueue()
    outcome: list[Any] = []

    def drive() -> None:
        try:
            outcome.append(run(driver(calls.put)))
        except BaseException as exc:  # raised on the caller's thread below
            outcome.append(exc)
        finally:
            calls.put(None)

    thread = threading.Thread(target=drive, name="ors-trl-lockstep", daemon=True)
    thread.start()
    while (call := calls.get()) is not None:
        call()
    thread.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return cast("_T", outcome[0])
