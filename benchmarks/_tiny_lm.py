"""A tiny chat model built here (no download), for the learning benchmark and its test.

``tokenizer(env_ids)``: a byte-level BPE trained on chat-template renders of the
given environments' conversations, with TRL's bundled Qwen3 chat template (tools,
``<tool_call>`` turns, ``<|im_end|>``). ``model(tokenizer, seed)``: a small Qwen3
with random weights. ``warm_up(...)``: supervised steps on whole token episodes
(next-token loss on the sampled positions only, mask 1), so that the model writes
the tool-call format before reinforcement learning starts. Needs the ``trl`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["model", "tokenizer", "tool_call", "warm_up"]

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    """An assistant turn's text in the Qwen3 tool-call format."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def _corpus(env_ids: Sequence[str], replies: Sequence[str], tasks: int) -> list[str]:
    import gymnasium as gym
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    import ors_gym  # noqa: F401  (registers the ors/ ids)
    from ors_gym.formats import render_messages

    raw = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    raw.chat_template = qwen3_chat_template
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
                                                       tokenize=False))
        finally:
            env.close()
    return out


def tokenizer(env_ids: Sequence[str], replies: Sequence[str], *, vocab: int = 600,
              tasks: int = 3) -> Any:
    """A ``PreTrainedTokenizerFast`` over text of ``env_ids``' first ``tasks`` tasks."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers import models as tok_models
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    bpe = Tokenizer(tok_models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(_corpus(env_ids, replies, tasks), trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=list(SPECIAL), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, chat_template=qwen3_chat_template)


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
            pad: int, steps: int, lr: float = 3e-3) -> list[float]:
    """Full-batch supervised steps on ``(prompt_ids, completion_ids, mask)`` rows: loss
    on the completion's mask-1 ids only. Returns the loss per step."""
    import torch

    seqs, labels = [], []
    for prompt, completion, mask in rows:
        seqs.append([*prompt, *completion])
        labels.append([-100] * len(prompt) + [t if m else -100
                                              for t, m in zip(completion, mask, strict=True)])
    width = max(len(s) for s in seqs)
    input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
    target = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    optimiser = torch.optim.AdamW(lm.parameters(), lr=lr)
    lm.train()
    losses = []
    for _ in range(steps):
        optimiser.zero_grad()
        loss = lm(input_ids=input_ids, attention_mask=attention, labels=target).loss
        loss.backward()
        optimiser.step()
        losses.append(float(loss.detach()))
    return losses
