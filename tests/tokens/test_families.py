"""Every model family through ``TokenEnv``, with its own completions.

Each family's tokenizer is a tiny one built around its real chat template and
special tokens (``tests/_families.py``), saved and loaded back from a folder: a
local checkpoint, whose family ``TokenEnv`` must find from the tokenizer itself.
Per family: a call in its own format reaches the environment as that call, a
plain reply reaches the terminal tool, reasoning stays in the ids and out of
the environment, the sampled ids are kept verbatim (a non-canonical split too),
the mask is 1 exactly on them, and the observation only grows.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("trl")
pytest.importorskip("renderers")

import ors_gym  # noqa: F401  (registers the ors/ ids)
from ors_gym.tokens import TokenEnv
from tests._families import FAMILIES, completion, encode, family_tokenizer
from tests._tiny_lm import non_canonical

COUNTER = "ors/Counter-v0"
QA = "ors/QA-v0"
#: The family ``TokenEnv`` reads each fixture as (renderers' name where one serves it).
EXPECTED = {
    "qwen3": "qwen3",
    "qwen3.5": "qwen3.5",
    "qwen3.6": "qwen3.6",
    "glm-4.5": "glm-4.5",
    "glm-5": "glm-5",
    "gpt-oss": "gpt-oss",
    "kimi-k2": "kimi-k2",
    "minimax-m2": "minimax-m2",
    "gemma4": "gemma4",
    "deepseek-v3": "deepseek-r1",  # TRL's "deepseekv3" template is R1's (it opens <think>)
    "deepseek-v3.1": "deepseek-v3.1",
    "llama-3": "llama-3",
}


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request: pytest.FixtureRequest) -> tuple[str, Any]:
    return request.param, family_tokenizer(request.param)


#: Families whose renderer cannot prove a turn append-only after a tool result (R1's
#: template writes no generation prompt there): each turn starts a new row.
NEW_ROWS = ("deepseek-v3",)
#: Families whose default generation prompt opens no reasoning block.
NO_THINK = ("llama-3", "kimi-k2", "deepseek-v3.1")


def sampled(tok: Any, name: str, *, think: str | None = None, **kwargs: Any) -> list[int]:
    if name == "deepseek-v3":  # R1's template opens <think> at the generation prompt
        return encode(tok, f"{think or ''}\n</think>\n\n" + completion(name, **kwargs))
    return encode(tok, completion(name, think=think, **kwargs))


def verbatim(tok: Any, ids: list[int]) -> list[int]:
    """The same text as other ids: a merged token of the second half split into bytes."""
    half = len(ids) // 2
    try:
        return ids[:half] + non_canonical(tok, ids[half:])
    except ValueError:
        return non_canonical(tok, ids)


def test_the_family_is_found_from_a_local_checkpoint(fam: tuple[str, Any]) -> None:
    name, tok = fam
    assert "/" in tok.name_or_path  # a folder, not a hub name
    env = TokenEnv(gym.make(COUNTER), tok)
    assert env.bridge.family.name == EXPECTED[name]
    env.close()


def test_a_call_reaches_the_env_as_that_call(fam: tuple[str, Any]) -> None:
    name, tok = fam
    env = TokenEnv(gym.make(COUNTER), tok)
    prompt, _ = env.reset(seed=0, options={"index": 0})
    think = None if name in NO_THINK else "I add two."
    turn = verbatim(tok, sampled(tok, name, calls=(("increment", {"amount": 2}),), think=think))
    ids, _, terminated, _, info = env.step({"ids": turn, "logprobs": [-0.5] * len(turn)})
    calls = info["calls"]
    assert [(c["name"], c["input"]) for c in calls] == [("increment", {"amount": 2})]
    assert calls[0]["ok"], calls[0]
    assert not terminated
    # the sampled ids verbatim (mask 1, their logprobs) after the prompt, then the env's
    first = env.trajectory.rows[0]
    assert first.prompt_ids == prompt and first.completion_ids[: len(turn)] == turn
    assert first.mask == [1] * len(turn) + [0] * (len(first.completion_ids) - len(turn))
    assert first.logprobs[: len(turn)] == [-0.5] * len(turn)
    if name not in NEW_ROWS:  # append-only: the observation is that row
        assert len(env.trajectory.rows) == 1 and ids == first.ids
    # the reasoning is kept in the ids, read apart, and never sent to the env
    if think is not None:
        assert info["turn"].reasoning and info["turn"].reasoning[0].text.strip() == think
        assert think not in str(calls)
    # the next turn appends again, the observation only grows
    done = sampled(tok, name, calls=(("done", {}),))
    more, _reward, terminated, _, info = env.step(done)
    assert [c["name"] for c in info["calls"]] == ["done"] and terminated
    if name in NEW_ROWS:
        assert env.trajectory.rows[-1].completion_ids[: len(done)] == done
    else:
        assert more[: len(ids)] == ids and more[len(ids) : len(ids) + len(done)] == done
        assert len(env.trajectory.rows) == 1
    env.close()


def test_a_plain_reply_reaches_the_terminal_tool(fam: tuple[str, Any]) -> None:
    name, tok = fam
    env = TokenEnv(gym.make(QA), tok)
    prompt, _ = env.reset(seed=0, options={"index": 0})
    think = None if name in NO_THINK else "Maybe London? No."
    reply = sampled(tok, name, calls=(), content="Paris", think=think)
    ids, reward, terminated, _, info = env.step(reply)
    assert (reward, terminated) == (1.0, True)  # graded "Paris", not the reasoning with it
    assert info["calls"][0]["input"] == {"answer": "Paris"}
    assert ids[len(prompt) : len(prompt) + len(reply)] == reply
    env.close()


def test_a_malformed_call_is_an_agent_error_in_the_familys_format(
    fam: tuple[str, Any],
) -> None:
    name, tok = fam
    if name in ("qwen3", "llama-3", "deepseek-v3", "deepseek-v3.1", "kimi-k2", "gpt-oss"):
        broken = completion(name, calls=(("increment", {"amount": 2}),)).replace("2", "2,", 1)
    else:  # an XML-ish family: a call without its closing marker
        good = completion(name, calls=(("increment", {"amount": 2}),))
        broken = good[: good.rindex("amount") + 6]
    if name == "deepseek-v3":  # R1's template opens <think> at the generation prompt
        broken = "\n</think>\n\n" + broken
    env = TokenEnv(gym.make(COUNTER), tok)
    env.reset(seed=0, options={"index": 0})
    _, _, terminated, _, info = env.step(encode(tok, broken))
    assert not info["calls"] and not terminated
    assert info["error_reason"] == "parse_error"
    note = info["observation"]["text"]
    assert "Write a call as" in note
    if name not in ("qwen3", "llama-3", "deepseek-v3", "deepseek-v3.1", "kimi-k2", "gpt-oss"):
        assert '"arguments"' not in note  # never told to abandon its own format for JSON
    env.close()


def test_an_unknown_template_is_read_hermes_style_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tok = family_tokenizer("qwen3")
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        for _ in range(2):
            TokenEnv(gym.make(COUNTER), tok).close()
    said = [r.getMessage() for r in caplog.records if "model family" in r.getMessage()]
    assert len(said) == 1 and "renderer=" in said[0] and "Hermes" in said[0]


def test_a_renderer_for_another_family_is_said(caplog: pytest.LogCaptureFixture) -> None:
    tok = family_tokenizer("glm-4.5")
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        env = TokenEnv(gym.make(COUNTER), tok, renderer="qwen3.5")
    assert env.bridge.family.name == "qwen3.5"
    assert any("looks like glm-4.5" in r.getMessage() for r in caplog.records)
    env.close()


@pytest.mark.parametrize("name", ["qwen3.5", "glm-4.5"])
def test_enable_thinking_false_reaches_a_hub_tokenizers_renderer(name: str) -> None:
    tok = family_tokenizer(name, local=False)
    env = TokenEnv(gym.make(COUNTER), tok, chat_template_kwargs={"enable_thinking": False})
    prompt, _ = env.reset(seed=0, options={"index": 0})
    expected = tok.apply_chat_template(
        env.trajectory.messages, tools=env.trajectory.tools, tokenize=False,
        add_generation_prompt=True, enable_thinking=False,
    )
    assert tok.decode(prompt) == expected
    env.close()


#: Families whose chat template renders an episode's messages back to exactly its ids (the
#: others rewrite a turn in history: GLM-5 drops an empty think block, gpt-oss writes the
#: recipient before the channel, Llama 3.2 writes today's date; R1 starts rows).
CANONICAL = ("qwen3", "qwen3.5", "qwen3.6", "glm-4.5", "gemma4", "deepseek-v3.1")


@pytest.mark.parametrize("name", CANONICAL)
def test_the_ids_are_the_templates_own_rendering(name: str) -> None:
    tok = family_tokenizer(name)
    env = TokenEnv(gym.make(COUNTER), tok)
    env.reset(seed=0, options={"index": 0})
    ids, *_ = env.step(verbatim(tok, sampled(tok, name, calls=(("increment", {"amount": 2}),))))
    traj = env.trajectory
    text = tok.apply_chat_template(traj.messages, tools=traj.tools, tokenize=False,
                                   add_generation_prompt=True)
    assert tok.decode(ids) == text  # the same text; the ids themselves as sampled
    assert encode(tok, text) != ids  # the split was not canonical: no re-encoding here
    env.close()


def test_a_template_that_refuses_the_probe_conversation_is_handled() -> None:
    """Some templates raise on a tool message their own assistant turn did not ask for:
    the bridge's probe does without it; a template that renders nothing is named."""
    tok = family_tokenizer("qwen3")
    strict = (
        "{% for m in messages %}{% if m.role == 'tool' and not loop.previtem.tool_calls %}"
        "{{ raise_exception('a tool message must follow a tool call') }}{% endif %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tok.chat_template = strict
    env = TokenEnv(gym.make(QA), tok, renderer="template")
    env.reset(seed=0, options={"index": 0})
    reply = encode(tok, "Paris<|im_end|>")
    _, reward, terminated, _, _ = env.step(reply)
    assert (reward, terminated) == (1.0, True)
    env.close()
    tok.chat_template = "{{ raise_exception('this template renders nothing') }}"
    with pytest.raises(ValueError, match=r"cannot render a plain conversation.*renders nothing"):
        TokenEnv(gym.make(QA), tok, renderer="template")


def test_a_gpt_oss_call_with_a_preamble_and_reasoning_is_bridged() -> None:
    """harmony's template refuses a calling turn with both text and reasoning: the turn's
    history keeps both in its analysis channel, and the episode goes on in one row."""
    tok = family_tokenizer("gpt-oss")
    env = TokenEnv(gym.make(COUNTER), tok)
    prompt, _ = env.reset(seed=0, options={"index": 0})
    turn = encode(tok, completion("gpt-oss", calls=(("increment", {"amount": 2}),),
                                  content="Adding two.", think="I add two."))
    ids, _, _, _, info = env.step(turn)
    assert [c["name"] for c in info["calls"]] == ["increment"]
    assert info["turn"].text == "Adding two." and info["turn"].reasoning[0].text == "I add two."
    assert ids[: len(prompt) + len(turn)] == prompt + turn and len(env.trajectory.rows) == 1
    env.close()


def test_a_template_of_its_own_is_rendered_as_it_is_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Qwen2.5's template writes Qwen3's call format but a default system prompt Qwen3's
    renderer does not: the tokenizer's own template renders, read by the family's rules."""
    from pathlib import Path

    import trl

    tok = family_tokenizer("qwen3")
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        env = TokenEnv(gym.make(COUNTER), tok)
    assert env.bridge.name == "template" and env.bridge.family.name == "qwen3"
    assert any("renders a prompt otherwise" in r.getMessage() for r in caplog.records)
    prompt, _ = env.reset(seed=0, options={"index": 0})
    traj = env.trajectory
    assert tok.decode(prompt) == tok.apply_chat_template(
        traj.messages, tools=traj.tools, tokenize=False, add_generation_prompt=True)
    _, _, _, _, info = env.step(sampled(tok, "qwen3", calls=(("increment", {"amount": 2}),)))
    assert [c["name"] for c in info["calls"]] == ["increment"]
    env.close()
