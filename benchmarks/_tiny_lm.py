"""A tiny chat model built here (no download), for the learning benchmark and its test.

``tokenizer(env_ids, family=...)``: a byte-level BPE trained on chat-template renders
of the given environments' conversations, with a model family's real chat template
as TRL ships it (``qwen3``: Qwen3's, Hermes JSON calls; ``qwen3.5``: Qwen3.5's,
``<function=...>`` XML calls, its tags and vision tokens single ids as in its own
tokenizer). ``tool_call(name, arguments, family)``: a call in that family's format.
``model(tokenizer, seed)``: a small Qwen3 with random weights. ``warm_up(...)``:
supervised steps on whole token episodes
(next-token loss on the sampled positions only, mask 1), so that the model writes
the tool-call format before reinforcement learning starts (optionally until each row
is likely); ``rows_probability(...)``: how likely the model writes each row's completion.
Needs the ``trl`` extra.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FAMILIES", "model", "rows_probability", "template_kwargs", "tokenizer",
           "tool_call", "warm_up"]

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class _Family:
    """A family's chat template (a file of TRL's), the tokens its own tokenizer has as
    single ids beyond ``SPECIAL``, and the template kwargs the benchmark renders with."""

    template: str
    special: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()


FAMILIES: dict[str, _Family] = {
    "qwen3": _Family("qwen3.jinja"),
    # Thinking off, as the small Qwen3.5 models default: the prompt closes an empty
    # <think> block, and the model writes its call at once.
    "qwen3.5": _Family(
        "qwen3_5_think.jinja",
        special=("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"),
        added=("<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>",
               "</tool_response>"),
        kwargs=(("enable_thinking", False),),
    ),
}


def tool_call(name: str, arguments: dict[str, Any], family: str = "qwen3") -> str:
    """An assistant turn's text: one call in ``family``'s tool-call format."""
    if family == "qwen3":
        return (f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}'
                "\n</tool_call>")
    from ors_gym.families import call_example

    return call_example(family, name, arguments)


def template_kwargs(family: str) -> dict[str, Any]:
    """The chat-template kwargs ``family``'s runs render with."""
    return dict(FAMILIES[family].kwargs)


def _template(family: str) -> str:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("needs trl (the trl extra) for its bundled chat templates")
    folder = Path(next(iter(spec.submodule_search_locations))) / "chat_templates"
    return (folder / FAMILIES[family].template).read_text(encoding="utf-8")


def _corpus(env_ids: Sequence[str], replies: Sequence[str], tasks: int,
            family: str) -> list[str]:
    import gymnasium as gym
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    import ors_gym  # noqa: F401  (registers the ors/ ids)
    from ors_gym.formats import render_messages

    raw = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    raw.chat_template = _template(family)
    out = []
    for env_id in env_ids:
        env = gym.make(env_id)
        try:
            for index in range(tasks):
                env.reset(options={"index": index})
                ors: Any = env.unwrapped
                prompt = render_messages(ors.messages(), "openai")
                for reply in replies:
                    result = {"role": "tool", "tool_call_id": "c", "content": "The counter is 3."}
                    chat = [*prompt, {"role": "assistant", "content": reply}, result,
                            {"role": "assistant", "content": reply}]
                    out.append(raw.apply_chat_template(chat, tools=ors.tools_as("openai"),
                                                       tokenize=False,
                                                       **template_kwargs(family)))
        finally:
            env.close()
    return out


def tokenizer(env_ids: Sequence[str], replies: Sequence[str], *, vocab: int = 600,
              tasks: int = 3, family: str = "qwen3", added: Sequence[str] = ()) -> Any:
    """A ``PreTrainedTokenizerFast`` over text of ``env_ids``' first ``tasks`` tasks, with
    ``family``'s chat template and single-id tokens (and ``added`` as single ids too)."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers import models as tok_models
    from transformers import PreTrainedTokenizerFast

    fam = FAMILIES[family]
    bpe = Tokenizer(tok_models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(_corpus(env_ids, replies, tasks, family), trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=[*SPECIAL, *fam.special], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    extra = [*fam.added, *(t for t in added if t not in fam.added)]
    if extra:
        bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, chat_template=_template(family))


def model(tok: Any, *, seed: int, hidden: int = 64, layers: int = 2) -> Any:
    """A small Qwen3 with random weights (seeded) over ``tok``'s vocabulary."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        head_dim=hidden // 4, max_position_embeddings=4096, tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    lm = Qwen3ForCausalLM(config)
    lm.generation_config.eos_token_id = tok.eos_token_id
    lm.generation_config.pad_token_id = tok.pad_token_id
    return lm


def warm_up(lm: Any, rows: Iterable[tuple[Sequence[int], Sequence[int], Sequence[int]]], *,
            pad: int, steps: int, lr: float = 3e-3, until: float | None = None) -> list[float]:
    """Full-batch supervised steps on ``(prompt_ids, completion_ids, mask)`` rows: loss
    on the completion's mask-1 ids only. Returns the loss per step.

    With ``until``, training stops (before a step) once every row's mask-1 ids have at
    least that probability together under the model, so a warm-up meant to leave several
    scripts likely ends where they are, whatever the processor's rounding made of the
    path there; ``steps`` then caps it. Callers check the outcome (rows_probability)."""
    import torch

    seqs, labels, prompts = [], [], []
    for prompt, completion, mask in rows:
        prompts.append(len(prompt))
        seqs.append([*prompt, *completion])
        labels.append([-100] * len(prompt) + [t if m else -100
                                              for t, m in zip(completion, mask, strict=True)])
    width = max(len(s) for s in seqs)
    input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
    target = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    # Logits only from the shortest prompt's last position on: the labelled ids are there.
    keep = width - min(prompts) + 1
    target = target[:, width - keep:]
    optimiser = torch.optim.AdamW(lm.parameters(), lr=lr)
    lm.train()
    losses = []
    for _ in range(steps):
        optimiser.zero_grad()
        logits = lm(input_ids=input_ids, attention_mask=attention, logits_to_keep=keep).logits
        if until is not None and min(_rows_logprob(logits.detach(), target)) >= math.log(until):
            break
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), target[:, 1:].flatten(), ignore_index=-100)
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    return losses


def _rows_logprob(logits: Any, target: Any) -> list[float]:
    """Each row's summed log-probability of its labelled ids (label -100 is ignored)."""
    import torch

    labels = target[:, 1:]
    logps = torch.log_softmax(logits[:, :-1].float(), -1)
    picked = logps.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
    return [float(x) for x in (picked * (labels != -100)).sum(-1)]


def rows_probability(lm: Any, rows: Iterable[tuple[Sequence[int], Sequence[int], Sequence[int]]],
                     ) -> list[float]:
    """Each ``(prompt_ids, completion_ids, mask)`` row's probability under ``lm``: its
    completion's mask-1 ids together, given what precedes each (the chance that sampling
    writes that script)."""
    import torch

    out = []
    with torch.no_grad():
        for prompt, completion, mask in rows:
            ids = torch.tensor([[*prompt, *completion]])
            target = torch.tensor([[-100] * len(prompt) + [t if m else -100 for t, m in zip(
                completion, mask, strict=True)]])
            out.append(math.exp(_rows_logprob(lm(input_ids=ids).logits, target)[0]))
    return out
