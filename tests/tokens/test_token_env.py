"""``TokenEnv``: token-level episodes over the bundled environments, with a real tokenizer.

The tokenizer is a byte-level BPE trained here with a real Qwen3 chat template
(``tests/_tiny_lm.py``). Every invariant is asserted so that an implementation
re-encoding the conversation's text would fail: sampled ids are given as a
non-canonical split, and the chat template rewrites history (it drops earlier
reasoning at a new user message). Both bridges run: the template diff and the
``renderers`` library's Qwen3 renderer.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import gymnasium as gym
import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs transformers and trl (the trl extra)", allow_module_level=True)

from _tiny_lm import answer_text, encode, non_canonical, tiny_tokenizer, tool_call_text

from ors_gym import AsyncOrsEnv
from ors_gym.tokens import AsyncTokenEnv, TokenEnv

RENDERERS = ["template"]
if importlib.util.find_spec("renderers") is not None:
    RENDERERS.append("qwen3")

COUNTER, QA, GRID, MATH = "ors/Counter-v0", "ors/QA-v0", "ors/GridWorld-v0", "ors/Math-v0"


@pytest.fixture(params=RENDERERS)
def renderer(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def sampled(tok: Any, text: str, *, close: bool = True) -> list[int]:
    """The ids a model would sample for ``text`` (its end-of-turn token last, unless cut)."""
    return encode(tok, text) + ([tok.eos_token_id] if close else [])


def template_ids(tok: Any, messages: list[Any], tools: list[Any], generation: bool) -> list[int]:
    text = tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=generation
    )
    return encode(tok, text)


def counter_turns(tok: Any) -> list[list[int]]:
    return [
        sampled(tok, tool_call_text("increment", {"amount": 3}, think="I add three.")),
        sampled(tok, tool_call_text("increment", {"amount": 3}, think="Three more.")),
        sampled(tok, tool_call_text("done", {}, think="It is 6.")),
    ]


# -- the invariants -------------------------------------------------------------------------


def test_observations_grow_and_keep_non_canonical_ids_verbatim(tok: Any, renderer: str) -> None:
    env = TokenEnv(gym.make(COUNTER), tok, renderer=renderer)
    obs, info = env.reset(seed=0, options={"index": 0})
    assert obs[-3:] == encode(tok, "<|im_start|>assistant\n")  # ends at the generation prompt
    for turn in counter_turns(tok)[:2]:
        odd = non_canonical(tok, turn)
        assert encode(tok, tok.decode(odd)) != odd  # re-encoding would not give these ids back
        new, _, terminated, truncated, info = env.step(odd)
        assert new[: len(obs)] == obs  # append-only
        assert new[len(obs) : len(obs) + len(odd)] == odd  # the sampled ids, verbatim
        assert not terminated and not truncated
        assert "The counter is now" in tok.decode(new[len(obs) + len(odd) :])
        obs = new
    assert info["text"].endswith("</tool_call>") and info["turn"].tool_calls[0].name == "increment"
    assert env.trajectory.ids == obs and len(env.trajectory.rows) == 1


def test_mask_is_one_exactly_on_sampled_ids_and_logprobs_align(tok: Any, renderer: str) -> None:
    env = TokenEnv(gym.make(COUNTER), tok, renderer=renderer)
    prompt, _ = env.reset(seed=0, options={"index": 0})
    spans = []
    for k, turn in enumerate(counter_turns(tok)):
        odd = non_canonical(tok, turn)
        logprobs = [-(k + 1) - i / 1000 for i in range(len(odd))]
        start = len(env.trajectory.completion_ids)
        env.step({"ids": odd, "logprobs": logprobs})
        spans.append((start, odd, logprobs))
    traj = env.trajectory
    assert traj.prompt_ids == prompt and traj.stop_reason == "env_ended"  # by the done tool
    assert len(traj.mask) == len(traj.logprobs) == len(traj.completion_ids)
    expected_mask = [0] * len(traj.completion_ids)
    expected_lp = [0.0] * len(traj.completion_ids)
    for start, ids, lps in spans:
        assert traj.completion_ids[start : start + len(ids)] == ids
        expected_mask[start : start + len(ids)] = [1] * len(ids)
        expected_lp[start : start + len(ids)] = lps
    assert traj.mask == expected_mask and traj.logprobs == expected_lp
    env_tokens = [t for t, m in zip(traj.completion_ids, traj.mask, strict=True) if not m]
    assert "<tool_response>" in tok.decode(env_tokens)  # the environment's, mask 0
    out = traj.to_trl()
    assert out == {
        "prompt_ids": prompt,
        "completion_ids": traj.completion_ids,
        "logprobs": expected_lp,
        "env_mask": expected_mask,
        "policy_versions": [None] * 3,
    }


def test_canonical_sequence_is_the_chat_template_of_the_messages(tok: Any, renderer: str) -> None:
    env = TokenEnv(gym.make(QA), tok, renderer=renderer)
    env.reset(seed=0, options={"index": 0})
    traj = env.trajectory
    env.step(sampled(tok, tool_call_text("hint", {}, think="I ask for a hint.")))
    mid = template_ids(tok, traj.messages, traj.tools, generation=True)
    assert traj.ids == mid  # mid-episode: the whole sequence, generation prompt included
    assert traj.messages[-1]["role"] == "tool" and "starts with" in traj.messages[-1]["content"]
    _, reward, terminated, _, _ = env.step(sampled(tok, answer_text("Paris", think="So: Paris.")))
    assert reward == 1.0 and terminated
    whole = template_ids(tok, traj.messages, traj.tools, generation=False)
    assert traj.ids == whole[: len(traj.ids)]  # the end: all of it up to the last end-of-turn
    assert whole[len(traj.ids) :] == encode(tok, "\n") and traj.ids[-1] == tok.eos_token_id


def test_reasoning_stays_in_the_tokens_and_is_not_graded(tok: Any, renderer: str) -> None:
    env = TokenEnv(gym.make(QA), tok, renderer=renderer)
    env.reset(seed=0, options={"index": 0})
    reply = sampled(tok, answer_text("Paris", think="Maybe London? No."))
    ids, reward, terminated, _, info = env.step(reply)
    assert reward == 1.0 and terminated  # graded "Paris", not the reasoning with it
    assert ids[-len(reply) :] == reply
    assert info["turn"].reasoning[0].text == "Maybe London? No."
    last = env.trajectory.messages[-1]  # the turn as the template renders it: reasoning apart
    assert last["content"] == "Paris" and last["reasoning_content"] == "Maybe London? No."


def test_a_cut_completion_is_closed_by_the_end_token(tok: Any, renderer: str) -> None:
    env = TokenEnv(gym.make(COUNTER), tok, renderer=renderer)
    obs, _ = env.reset(seed=0, options={"index": 0})
    cut = sampled(tok, tool_call_text("increment", {"amount": 2}), close=False)
    new, *_ = env.step(cut)
    after = len(obs) + len(cut)
    assert new[after] == tok.eos_token_id  # the template's end-of-turn token ...
    traj = env.trajectory
    assert traj.mask[after - len(obs)] == 0  # ... added by the environment
    assert traj.messages[-1]["content"] == "The counter is now 2."  # the call still ran
    # the same when the cut completion ends the episode
    done = sampled(tok, tool_call_text("done", {}), close=False)
    final, *_ = env.step(done)
    assert final[-1] == tok.eos_token_id and traj.mask[-1] == 0 and traj.stop_reason == "env_ended"


def test_max_tokens_truncates_before_the_reply_would_overflow(tok: Any) -> None:
    env = TokenEnv(gym.make(COUNTER), tok, max_tokens=60)
    env.reset(seed=0, options={"index": 0})
    assert env.remaining_tokens == 60
    turn = sampled(tok, tool_call_text("increment", {"amount": 1}))
    _, _, terminated, truncated, info = env.step(turn)
    assert not truncated and env.remaining_tokens is not None and env.remaining_tokens < 60
    _, _, terminated, truncated, info = env.step(turn)
    traj = env.trajectory
    assert truncated and not terminated and traj.stop_reason == info["stop_reason"] == "max_tokens"
    assert len(traj.completion_ids) <= 60 and traj.completion_ids[-len(turn) :] == turn
    assert traj.to_skyrl()["stop_reasons"] == "length"
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(turn)


def test_the_envs_max_steps_truncate(tok: Any) -> None:
    env = TokenEnv(gym.make(QA, max_episode_steps=2), tok)
    env.reset(seed=0, options={"index": 0})
    hint = sampled(tok, tool_call_text("hint", {}))
    assert env.step(hint)[3] is False
    _, _, terminated, truncated, _ = env.step(hint)
    assert truncated and not terminated and env.trajectory.stop_reason == "max_turns"


@pytest.mark.parametrize("env_id", [COUNTER, MATH, QA])
def test_the_episode_return_is_the_envs_own(tok: Any, env_id: str) -> None:
    texts = {
        COUNTER: [tool_call_text("increment", {"amount": 5}), tool_call_text("increment",
                  {"amount": 1}), tool_call_text("done", {})],
        MATH: ["I think it is three.", tool_call_text("submit", {"answer": "3"}, think="23-20")],
        QA: [tool_call_text("hint", {}), answer_text("Paris")],
    }[env_id]
    plain = gym.make(env_id)
    plain.reset(seed=0, options={"index": 0})
    env = TokenEnv(gym.make(env_id), tok)
    env.reset(seed=0, options={"index": 0})
    own, mine = [], []
    for text in texts:
        own.append(float(plain.step(text)[1]))
        mine.append(float(env.step(sampled(tok, text))[1]))
    plain.close()
    assert mine == own and env.trajectory.reward == sum(own) and env.trajectory.rewards == own
    assert env.trajectory.reward > 0
    # QA's plain answer goes to its terminal tool; the others end on a tool call
    assert env.trajectory.stop_reason == ("completed" if env_id == QA else "env_ended")


# -- rows, images, transports ---------------------------------------------------------------


def test_a_template_rewriting_history_starts_a_new_row(tok: Any, renderer: str) -> None:
    """Math nudges a reply without a tool call (a user message): Qwen3's template then drops
    the earlier reasoning, so the ids cannot be extended; a new row starts."""
    env = TokenEnv(gym.make(MATH), tok, renderer=renderer)
    env.reset(seed=0, options={"index": 0})
    first = non_canonical(tok, sampled(tok, answer_text("Three?", think="23-20 is 3.")))
    obs, _, _, _, info = env.step(first)
    traj = env.trajectory
    assert info["rows"] == 2 and traj.step_wise and traj.stop_reason is None
    row0, row1 = traj.rows
    assert row0.completion_ids[: len(first)] == first and row0.mask[: len(first)] == [1] * len(
        first
    )
    assert row0.completion_ids[len(first) :] == [] or row0.mask[len(first) :] == [0]
    assert obs == row1.prompt_ids == template_ids(tok, traj.messages, traj.tools, True)
    assert "23-20 is 3." not in tok.decode(row1.prompt_ids)  # the template dropped it
    assert traj.messages[-1]["role"] == "user" and "No tool was called" in traj.messages[-1][
        "content"
    ]
    last = sampled(tok, tool_call_text("submit", {"answer": "3"}, think="Submit."))
    obs2, reward, terminated, _, _ = env.step(last)
    assert terminated and reward == 1.0 and obs2[len(obs) :] == last
    assert traj.prompt_ids == row1.prompt_ids and traj.mask == [1] * len(last)
    assert traj.turns == 2 and traj.to_skyrl()["is_last_step"] is True
    assert traj.to_skyrl(0)["is_last_step"] is False


def test_images_become_a_note_for_a_text_model_and_ride_with_the_trajectory(tok: Any) -> None:
    env = TokenEnv(gym.make(GRID), tok)
    obs, _ = env.reset(seed=0, options={"index": 0})
    traj = env.trajectory
    assert all(isinstance(m["content"], str) for m in traj.messages)
    assert "image(s) not shown" in tok.decode(obs) and len(traj.images) == 1
    env.step(sampled(tok, tool_call_text("move", {"direction": "down"})))
    tool = traj.messages[-1]
    assert tool["role"] == "tool" and tool["content"].startswith("Moved down")
    assert tool["content"].endswith("[1 image(s) not shown: this model reads text only]")
    assert len(traj.rows) == 1 and len(traj.images) == 2 and traj.images[1].ndim == 3
    assert "multi_modal_data" not in traj.to_verl()  # notes, no placeholders to fill


def test_over_http_the_same_ids_as_in_process(tok: Any, server_url: str) -> None:
    from ors_gym import OrsEnv

    runs = []
    for env in (gym.make(COUNTER), gym.make("ors/Remote-v0", base_url=server_url,
                                             env_name="counter"),
                OrsEnv(base_url=server_url, env_name="counter")):
        token_env = TokenEnv(env, tok)
        token_env.reset(seed=0, options={"index": 0})
        for turn in counter_turns(tok):
            token_env.step(non_canonical(tok, turn))
        runs.append(token_env.trajectory)
        token_env.close()
    local = runs[0]
    for remote in runs[1:]:
        assert remote.ids == local.ids and remote.mask == local.mask
        assert remote.reward == local.reward == 1.0 and remote.messages == local.messages


@pytest.mark.parametrize("where", ["local", "http"])
def test_the_async_twin_gives_the_same_results(tok: Any, server_url: str, where: str) -> None:
    from ors_gym.envs import Counter

    sync = TokenEnv(gym.make(COUNTER), tok)
    sync.reset(seed=0, options={"index": 0})
    want = [sync.step(non_canonical(tok, t))[:4] for t in counter_turns(tok)]

    async def run() -> list[Any]:
        core = (AsyncOrsEnv(env_class=Counter) if where == "local"
                else AsyncOrsEnv(base_url=server_url, env_name="counter"))
        async with AsyncTokenEnv(core, tok) as env:
            await env.reset(seed=0, options={"index": 0})
            got = [(await env.step(non_canonical(tok, t)))[:4] for t in counter_turns(tok)]
            assert env.trajectory.ids == sync.trajectory.ids
            assert env.trajectory.mask == sync.trajectory.mask
            return got

    assert asyncio.run(run()) == want


# -- exporters and bad input -------------------------------------------------------------------


def test_exporters_use_each_trainers_field_names(tok: Any) -> None:
    env = TokenEnv(gym.make(COUNTER), tok)
    env.reset(seed=0, options={"index": 0})
    for turn in counter_turns(tok):
        env.step(turn)
    traj = env.trajectory
    trl = traj.to_trl()
    assert trl["logprobs"] is None and not traj.logprobs_given  # the sampler gave none
    verl = traj.to_verl()
    assert verl["prompt_ids"] == traj.prompt_ids and verl["response_ids"] == traj.completion_ids
    assert verl["response_mask"] == traj.mask and verl["reward_score"] == 1.0
    assert verl["num_turns"] == len(traj.messages)
    sky = traj.to_skyrl()
    assert sky["prompt_token_ids"] == traj.prompt_ids and sky["loss_masks"] == traj.mask
    assert sky["response_ids"] == traj.completion_ids and sky["rewards"] == 1.0
    assert sky["stop_reasons"] == "stop" and sky["rollout_logprobs"] is None


def test_bad_actions_are_explained(tok: Any) -> None:
    env = TokenEnv(gym.make(COUNTER), tok)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="not text"):
        env.step("increment")
    with pytest.raises(ValueError, match=r"token id 99999 .* vocabulary"):
        env.step([1, 99999])
    with pytest.raises(ValueError, match="logprobs has 1 values for 2 ids"):
        env.step({"ids": [1, 2], "logprobs": [0.0]})
    with pytest.raises(ValueError, match="needs 'ids'"):
        env.step({"tokens": [1]})
    assert env.trajectory.turns == 0  # nothing ran
    with pytest.raises(TypeError, match="needs an ORS environment"):
        TokenEnv(gym.make("CartPole-v1"), tok)


# -- other templates and renderers --------------------------------------------------------------


def test_a_template_that_always_rewrites_history_gives_one_row_per_turn(tok: Any) -> None:
    """With thinking off, Qwen3's generation prompt prefills an empty ``<think>`` block that
    the template drops from history: no turn can be appended, each starts a row."""
    env = TokenEnv(gym.make(COUNTER), tok, renderer="template",
                   chat_template_kwargs={"enable_thinking": False})
    prompt, _ = env.reset(seed=0, options={"index": 0})
    assert tok.decode(prompt).endswith("<think>\n\n</think>\n\n")
    turns = [non_canonical(tok, sampled(tok, tool_call_text("increment", {"amount": 3})))
             for _ in range(2)]
    for k, turn in enumerate(turns, start=2):
        obs, *_ = env.step(turn)
        assert len(env.trajectory.rows) == k
    traj = env.trajectory
    for row, turn in zip(traj.rows, turns, strict=False):
        assert row.completion_ids == turn and row.mask == [1] * len(turn)
    assert obs == traj.rows[-1].prompt_ids and traj.rows[-1].completion_ids == []
    assert obs == template_ids(tok, traj.messages, traj.tools, True) + encode(
        tok, "<think>\n\n</think>\n\n")


def test_renderer_choices_and_their_errors(tok: Any) -> None:
    env = TokenEnv(gym.make(COUNTER), tok)
    # A local tokenizer: no hub name, but its chat template is Qwen3's.
    assert env.bridge.family.name == "qwen3"
    assert env.bridge.name == ("renderers:qwen3" if "qwen3" in RENDERERS else "template")
    assert TokenEnv(gym.make(COUNTER), tok, renderer="template").bridge.name == "template"
    with pytest.raises(TypeError, match="renderer must be"):
        TokenEnv(gym.make(COUNTER), tok, renderer=3)
    no_template = tiny_tokenizer()
    no_template.chat_template = None
    with pytest.raises(ValueError, match="no chat_template"):
        TokenEnv(gym.make(COUNTER), no_template)
    if "qwen3" in RENDERERS:  # the template's kwargs reach the renderer, checked by it
        env = TokenEnv(gym.make(COUNTER), tok, renderer="qwen3",
                       chat_template_kwargs={"enable_thinking": False})
        prompt, _ = env.reset(seed=0, options={"index": 0})
        assert tok.decode(prompt).endswith("<think>\n\n</think>\n\n")
        with pytest.raises(ValueError, match="not_a_template_kwarg"):
            TokenEnv(gym.make(COUNTER), tok, renderer="qwen3",
                     chat_template_kwargs={"not_a_template_kwarg": 1})


@pytest.mark.slow  # imports the image processor (and torch with it)
@pytest.mark.skipif("qwen3" not in RENDERERS, reason="needs renderers (the tokens extra)")
def test_a_multimodal_renderer_gets_image_placeholders_and_the_pixels() -> None:
    """renderers' Qwen3-VL renderer with an image processor built here: GridWorld's images
    become ``<|image_pad|>`` runs in the ids, and their pixel data rides with the record."""
    import types

    from renderers import Qwen3VLRenderer
    from transformers import Qwen2VLImageProcessorPil

    vl = tiny_tokenizer()
    vl.add_tokens(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
                  special_tokens=True)
    pad = vl.convert_tokens_to_ids("<|image_pad|>")
    images = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112)
    renderer = Qwen3VLRenderer(vl, processor=types.SimpleNamespace(image_processor=images))
    env = TokenEnv(gym.make(GRID), vl, renderer=renderer)
    prompt, info = env.reset(seed=0, options={"index": 0})
    traj = env.trajectory
    assert info["renderer"] == "renderers:qwen3-vl" and env.bridge.multimodal
    first = prompt.count(pad)
    assert first > 0 and "not shown" not in vl.decode(prompt)
    move = non_canonical(vl, sampled(vl, tool_call_text("move", {"direction": "down"})))
    obs, *_ = env.step(move)
    assert obs[: len(prompt)] == prompt and obs[len(prompt) : len(prompt) + len(move)] == move
    assert obs.count(pad) == 2 * first and len(traj.rows) == 1
    data = traj.multi_modal_data
    assert [p.length for p in data.mm_placeholders["image"]] == [first, first]
    assert [obs[p.offset] for p in data.mm_placeholders["image"]] == [pad, pad]
    assert len(data.mm_items["image"]) == 2 and len(traj.images) == 2


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_keeps_history_needs_no_new_row(tok: Any) -> None:
    """A plain ChatML template renders every turn as given: the nudge that makes Qwen3's
    template start a row is appended here, and the whole episode is one sequence."""
    chatml = tiny_tokenizer(CHATML)
    env = TokenEnv(gym.make(MATH), chatml)
    env.reset(seed=0, options={"index": 0})
    first = sampled(chatml, answer_text("Three?", think="23-20 is 3."))
    obs, *_ = env.step(first)
    traj = env.trajectory
    assert len(traj.rows) == 1 and traj.messages[-1]["role"] == "user"
    assert obs == template_ids(chatml, traj.messages, traj.tools, True)
    assert "23-20 is 3." in chatml.decode(obs)  # the reasoning is still there
    last = sampled(chatml, tool_call_text("submit", {"answer": "3"}))
    obs2, reward, terminated, _, _ = env.step(last)
    assert terminated and reward == 1.0 and obs2[: len(obs)] == obs and len(traj.rows) == 1
    assert traj.mask.count(1) == len(first) + len(last)
