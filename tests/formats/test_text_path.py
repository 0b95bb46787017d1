"""The text path reads a model family's raw completion text by that family's rules.

``gym.make(..., tool_format=...)``, ``Conversation(env, tokenizer=...)`` (the family found
from the tokenizer's real chat template, ``tests/_families.py``) and ``ors-gym eval
--tool-format`` against a real OpenAI-compatible server that answers raw text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import ors_gym  # noqa: F401  (registers the ors/ ids)
from ors_gym.cli import main
from ors_gym.families import call_example
from ors_gym.wrappers import Conversation
from tests._openai_server import OpenAIServer

pytest.importorskip("renderers")  # the families' parsers are renderers' own


QWEN35_MOVE = "<think>\nThe goal is below.\n</think>\n\n" + call_example(
    "qwen3.5", "move", {"direction": "down"}
)


def test_a_str_action_is_read_by_the_named_family() -> None:
    env = gym.make("ors/GridWorld-v0", tool_format="qwen3.5")
    env.reset(seed=0)
    _, _, _, _, info = env.step(QWEN35_MOVE)
    assert [(c["name"], c["input"]) for c in info["calls"]] == [("move", {"direction": "down"})]
    # the same text without tool_format is not a call: the model is told to write JSON
    plain = gym.make("ors/GridWorld-v0")
    plain.reset(seed=0)
    _, _, _, _, info = plain.step(QWEN35_MOVE)
    assert not info["calls"] and info["error_reason"] == "parse_error"
    env.close()
    plain.close()


def test_a_malformed_call_is_told_in_the_familys_own_format() -> None:
    env = gym.make("ors/GridWorld-v0", tool_format="glm-4.5")
    env.reset(seed=0)
    broken = "<tool_call>move<arg_key>direction</arg_key><arg_value>down</tool_call>"
    obs, _, _, _, info = env.step(broken)
    assert not info["calls"] and info["error_reason"] == "parse_error"
    assert "<arg_key>" in obs["text"] and '"arguments"' not in obs["text"]
    env.close()


def test_an_unknown_tool_format_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown model family 'qwen9'"):
        gym.make("ors/GridWorld-v0", tool_format="qwen9")


def test_conversation_finds_the_family_from_the_tokenizer_and_renders_its_tool_prompt() -> None:
    from _families import family_tokenizer

    tok = family_tokenizer("qwen3.5")
    env = Conversation(gym.make("ors/GridWorld-v0"), tokenizer=tok)
    assert env.tool_format == "qwen3.5"
    env.reset(seed=0)
    prompt = env.prompt_text()
    assert "<function=example_function_name>" in prompt  # Qwen3.5's own tool prompt
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    messages, _, _, _, info = env.step(QWEN35_MOVE + "<|im_end|>")
    assert [c["name"] for c in info["calls"]] == ["move"]
    assert messages[-3]["tool_calls"][0]["function"]["name"] == "move"  # then tool, image
    env.close()


def _raw_text(text: str) -> Any:
    """An endpoint that returns the model's raw completion as the message's content."""
    def respond(messages: list[Any], tools: list[Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": text}
    return respond


def test_eval_reads_raw_replies_with_tool_format(tmp_path: Path) -> None:
    move = call_example("qwen3.5", "move", {"direction": "down"})
    with OpenAIServer(respond=_raw_text(move)) as srv:
        code = main(["eval", "ors/GridWorld-v0", "--model", "raw", "--base-url", srv.base_url,
                     "--episodes", "1", "--max-turns", "2", "--tool-format", "qwen3.5",
                     "--out", str(tmp_path / "fmt"), "--no-progress-bar"])
    assert code == 0
    record = json.loads((tmp_path / "fmt" / "trajectories.jsonl").read_text().splitlines()[0])
    step = record["steps"][0]
    assert [c["name"] for c in step["tool_calls"]] == ["move"] and step["parse_errors"] == []
    assert main(["eval", "ors/GridWorld-v0", "--model", "scripted", "--tool-format", "qwen9",
                 "--out", str(tmp_path / "bad")]) == 2
