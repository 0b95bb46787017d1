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
