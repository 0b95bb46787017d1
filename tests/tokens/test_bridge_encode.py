"""``TemplateBridge`` encodes a render with a fast tokenizer's own ``tokenizers.Tokenizer``
(transformers' per-call wrapping skipped): the ids are those calling the tokenizer gives,
for every family's tiny tokenizer, and the tokenizer's call is used where its settings
would make the two differ (special tokens split, truncation set on the backend)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("transformers")

from ors_gym.tokens import TemplateBridge
from tests._families import (
    FAMILIES,
    assistant_message,
    environment_prompts,
    family_tokenizer,
    tool_message,
)


def _chat(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    prompt, tools = environment_prompts()[0]
    calls = (("increment", {"amount": 3}),)
    return ([*prompt, assistant_message(name, calls, think="I add three."),
             tool_message(name, "The counter is now 3.", tool="increment")], list(tools))


def _called(tok: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                   add_generation_prompt=True)
    return list(tok(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("name", FAMILIES)
def test_the_bridge_encodes_as_the_tokenizer_call_does(name: str, caplog: Any) -> None:
    tok = family_tokenizer(name)
    assert tok.is_fast
    messages, tools = _chat(name)
    with caplog.at_level(logging.ERROR):  # templates that show no tools warn; not the point
        bridge = TemplateBridge(tok, family=name)
    assert bridge.prompt(messages, tools) == _called(tok, messages, tools)


def test_split_special_tokens_is_honoured() -> None:
    tok = family_tokenizer("qwen3")
    messages, tools = _chat("qwen3")
    bridge = TemplateBridge(tok, family="qwen3")
    whole = bridge.prompt(messages, tools)
    tok.split_special_tokens = True
    split = bridge.prompt(messages, tools)
    assert split == _called(tok, messages, tools)
    assert len(split) > len(whole)  # <|im_start|> and the like as several ids


def test_truncation_set_on_the_backend_does_not_cut_the_prompt() -> None:
    tok = family_tokenizer("qwen3")
    messages, tools = _chat("qwen3")
    bridge = TemplateBridge(tok, family="qwen3")
    whole = bridge.prompt(messages, tools)
    tok.backend_tokenizer.enable_truncation(max_length=8)
    assert bridge.prompt(messages, tools) == whole
    assert len(whole) > 8


@pytest.mark.parametrize("name", ["qwen3", "gpt-oss", "kimi-k2"])
def test_a_renderers_tokenizer_gives_the_tokenizers_ids_and_offsets(name: str) -> None:
    from ors_gym.tokens.bridge import BackendEncoding

    tok = family_tokenizer(name)
    messages, tools = _chat(name)
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    fast = BackendEncoding(tok)
    assert fast.encode(text, add_special_tokens=False) == tok.encode(text,
                                                                     add_special_tokens=False)
    got = fast(text, add_special_tokens=False, return_offsets_mapping=True)
    want = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert list(got["input_ids"]) == list(want["input_ids"])
    assert [tuple(o) for o in got["offset_mapping"]] == [tuple(o) for o in
                                                         want["offset_mapping"]]
    assert len(fast) == len(tok)
    assert fast.eos_token_id == tok.eos_token_id
