"""A tiny language model's parts built here, for tests that need real tokens (no download).

``tiny_tokenizer()``: a byte-level BPE trained on local text (chat-template renders
of the bundled environments' prompts, tools, tool calls and ``<think>`` blocks) with TRL's
bundled Qwen3 chat template (tools, ``<think>`` reasoning, ``<|im_end|>`` turns); as in
Qwen3's own tokenizer, the tool-call, tool-response and think tags are single added tokens.
``tiny_model(tokenizer)``: a two-layer Qwen3 with random weights over that vocabulary.
``non_canonical(tokenizer, ids)``: the same text as other ids, one merged token split
into its bytes, as a sampler may produce and a re-encoding never gives back.
Needs the ``trl`` extra (transformers, tokenizers, trl); callers skip without it.
"""

from __future__ import annotations

import functools
from typing import Any

QWEN3_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Added (not special) tokens, as in Qwen3's own tokenizer: each is one id.
QWEN3_ADDED = (
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool_response>",
    "</tool_response>",
)
_ENVS = ("ors/QA-v0", "ors/Counter-v0", "ors/GridWorld-v0", "ors/Math-v0")


@functools.lru_cache(maxsize=1)
def qwen3_template() -> str:
    """TRL's bundled Qwen3 chat template (``trl.chat_template_utils.qwen3_chat_template``),
    read from TRL's package folder without importing TRL (which imports much more)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("needs trl (the trl extra) for its Qwen3 chat template")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return (folder / "chat_templates" / "qwen3.jinja").read_text(encoding="utf-8")


def tool_call_text(name: str, arguments: dict[str, Any], *, think: str | None = None) -> str:
    """A completion's text in the Qwen3 format (optionally with a reasoning block first)."""
    import json

    body = f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'
    return body if think is None else f"<think>\n{think}\n</think>\n\n{body}"


def answer_text(answer: str, *, think: str | None = None) -> str:
    """A plain reply (no tool call), optionally after a reasoning block."""
    return answer if think is None else f"<think>\n{think}\n</think>\n\n{answer}"


def _corpus() -> list[str]:
    """Chat-template renders of conversations over the bundled environments."""
    import gymnasium as gym
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    import ors_gym  # noqa: F401  (registers the ors/ ids)
    from ors_gym.formats import render_messages

    raw = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    raw.chat_template = qwen3_template()
    replies = [
        answer_text("Paris", think="The capital of France is Paris."),
        answer_text("I do not know."),
        tool_call_text("increment", {"amount": 3}, think="I add three."),
        tool_call_text("move", {"direction": "down"}),
        tool_call_text("submit", {"answer": "3"}, think="23 - 20 = 3"),
        tool_call_text("hint", {}),
        tool_call_text("done", {}),
    ]
    corpus = []
    for env_id in _ENVS:
        env = gym.make(env_id)
        try:
            for index in range(3):
                env.reset(seed=0, options={"index": index})
                ors = env.unwrapped
                tools = ors.tools_as("openai")  # type: ignore[attr-defined]
                prompt = [
                    {
                        "role": m["role"],
                        "content": m["content"]
                        if isinstance(m["content"], str)
                        else " ".join(p.get("text", "") for p in m["content"]),
                    }
                    for m in render_messages(ors.messages(), "openai")  # type: ignore[attr-defined]
                ]
                for reply in replies:
                    chat = [
                        *prompt,
                        {"role": "assistant", "content": reply},
                        {"role": "tool", "tool_call_id": "c", "content": "The counter is now 1."},
                        {"role": "assistant", "content": reply},
                    ]
                    corpus.append(raw.apply_chat_template(chat, tools=tools, tokenize=False))
        finally:
            env.close()
    return corpus


@functools.lru_cache(maxsize=1)
def _trained() -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        _corpus() * 2,
        trainers.BpeTrainer(
            vocab_size=1200,
            special_tokens=list(QWEN3_SPECIAL),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    bpe.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN3_ADDED])
    return bpe.to_str()


def tiny_tokenizer(chat_template: str | None = None) -> Any:
    """A fresh ``PreTrainedTokenizerFast`` (the BPE is trained once per process)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained()),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=chat_template or qwen3_template(),
    )


def tiny_model(tokenizer: Any, *, seed: int = 0) -> Any:
    """A two-layer Qwen3 with random weights over ``tokenizer``'s vocabulary."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def encode(tokenizer: Any, text: str) -> list[int]:
    """``text``'s canonical ids (no special tokens added)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def non_canonical(tokenizer: Any, ids: list[int]) -> list[int]:
    """``ids`` with their first merged (multi-byte) token split into single-byte tokens:
    the same text, ids a re-encoding would not give back."""
    vocab = tokenizer.get_vocab()
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    for i, tid in enumerate(ids):
        piece = tokenizer.convert_ids_to_tokens(tid)
        if tid in special or len(piece) < 2 or any(ch not in vocab for ch in piece):
            continue
        split = [vocab[ch] for ch in piece]
        out = [*ids[:i], *split, *ids[i + 1 :]]
        assert tokenizer.decode(out) == tokenizer.decode(ids) and out != ids
        return out
    raise ValueError("no merged token to split in these ids")
