"""Vision-language models at the token level: GridWorld's frames, exactly as the model sees them.

Tiny tokenizers around the families' real chat templates and vision tokens
(``tests/_families.py``), and the families' own processor classes from
transformers built around them (``tests/_processors.py``: no download). Each
episode's ids are checked against the processor's own expansion of the same
conversation (``processor.apply_chat_template`` then ``processor(text, images)``),
over GridWorld in-process and over HTTP.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

if any(importlib.util.find_spec(m) is None for m in ("transformers", "trl", "renderers")):
    pytest.skip("needs transformers, trl and renderers (the trl and tokens extras)",
                allow_module_level=True)

from _families import chat_template, completion, family_tokenizer
from _processors import processor_class, qwen_processor

from ors_gym.envs import GridWorld
from ors_gym.serving import ServerThread
from ors_gym.tokens import AsyncTokenEnv, TokenBatch, TokenEnv, stops

GRID = "ors/GridWorld-v0"
#: A 3x3 grid from the top-left corner to the bottom-right, 28 px cells (84x84 frames).
TASK = {"task_spec": {"size": 3, "start": [0, 0], "goal": [2, 2], "cell_px": 28}}
#: A way there: a blocked move first (the frame repeats), then four moves.
MOVES = ("up", "right", "right", "down", "down")


@pytest.fixture(scope="module")
def qwen() -> Any:
    """Qwen3.5's tiny tokenizer in a ``Qwen3VLProcessor`` (the class Qwen3.5 ships)."""
    return qwen_processor(family_tokenizer("qwen3.5"))


@pytest.fixture(scope="module")
def gemma() -> Any:
    """Gemma 4's tiny tokenizer (with the vision and audio tokens its processor reads) in a
    ``Gemma4Processor``."""
    import transformers

    base = family_tokenizer("gemma4")
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=base.backend_tokenizer, bos_token=base.bos_token,
        eos_token=base.eos_token, pad_token=base.pad_token, chat_template=base.chat_template,
        extra_special_tokens={"image_token": "<|image|>", "boi_token": "<|image>",
                              "eoi_token": "<image|>", "audio_token": "<|audio|>",
                              "boa_token": "<|audio>", "eoa_token": "<audio|>"})
    cls = processor_class(transformers.Gemma4Processor, ("video_processor", "feature_extractor"))
    return cls(feature_extractor=None,
               image_processor=transformers.Gemma4ImageProcessorPil(max_soft_tokens=70),
               tokenizer=tok, video_processor=None, chat_template=tok.chat_template)


@pytest.fixture(scope="module")
def grid_url() -> Iterator[str]:
    with ServerThread([GridWorld]) as srv:
        yield srv.url


def grid(where: str, url: str) -> Any:
    return gym.make(GRID, base_url=url) if where == "http" else gym.make(GRID)


def turn(name: str, tok: Any, direction: str) -> list[int]:
    # Gemma 4's template re-renders a thought with a newline the model need not write
    think = None if name == "gemma4" else "I move."
    text = completion(name, (("move", {"direction": direction}),), think=think)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def pad_of(name: str, tok: Any) -> int:
    return int(tok.convert_tokens_to_ids("<|image|>" if name == "gemma4" else "<|image_pad|>"))


def processor_ids(proc: Any, traj: Any) -> list[int]:
    """The processor's own ids for the last row: its chat template over the conversation,
    each image expanded by ``processor(text, images)``."""
    text = proc.apply_chat_template(traj.messages, tools=traj.tools, tokenize=False,
                                    add_generation_prompt=True)
    out = proc(text=[text], images=list(traj.rows[-1].images) or None)
    return [int(t) for t in out["input_ids"][0]]


# -- the ids are the processor's, and the episode is one row -----------------------------


@pytest.mark.parametrize("where", ["local", "http"])
@pytest.mark.parametrize("name", ["qwen3.5", "gemma4"])
def test_images_sit_in_their_tool_messages_and_the_ids_are_the_processors(
    name: str, where: str, qwen: Any, gemma: Any, grid_url: str
) -> None:
    proc = qwen if name == "qwen3.5" else gemma
    tok = proc.tokenizer
    env = TokenEnv(grid(where, grid_url), proc)  # the processor in the tokenizer's place
    obs, info = env.reset(options=TASK)
    traj = env.trajectory
    assert env.bridge.multimodal and info["renderer"] == f"renderers:{name}"
    assert obs == processor_ids(proc, traj) and len(traj.rows[0].images) == 1
    pad, run = pad_of(name, tok), obs.count(pad_of(name, tok))
    assert run > 0 and "not shown" not in tok.decode(obs)
    for k, direction in enumerate(MOVES):
        sampled = turn(name, tok, direction)
        new, reward, terminated, _, info = env.step(sampled)
        assert new[: len(obs)] == obs and new[len(obs): len(obs) + len(sampled)] == sampled
        if terminated:
            break
        assert len(traj.rows) == 1  # append-only: the frame is inside the tool message
        assert traj.messages[-1]["role"] == "tool"
        assert [p["type"] for p in traj.messages[-1]["content"]] == ["text", "image"]
        assert new.count(pad) == (k + 2) * run and len(traj.rows[0].images) == k + 2
        assert new == processor_ids(proc, traj)  # the expansion equals the ids, every step
        obs = new
    assert terminated and reward == 1.0 and traj.stop_reason == stops.ENV_ENDED
    row = traj.rows[0]
    # the final frame (at the goal) was sent but never read: recorded, not exported
    assert len(traj.images) == len(MOVES) + 1 and len(row.images) == len(MOVES)
    data = row.multi_modal_data
    spans = data.mm_placeholders["image"]
    assert [s.length for s in spans] == [run] * len(MOVES)
    assert all(set(row.ids[s.offset: s.offset + s.length]) == {pad} for s in spans)
    assert traj.to_verl()["multi_modal_data"]["images"] == row.images
    assert traj.to_trl()["images"] == row.images
    assert row.images[1].tobytes() == row.images[0].tobytes()  # the blocked move's frame


def test_a_new_row_carries_every_image_its_prompt_shows(qwen: Any) -> None:
    """A plain reply (no call) gets a nudge: a user turn, at which Qwen3.5's template drops
    earlier reasoning, so a new row starts; it shows both frames, and exports both."""
    tok = qwen.tokenizer
    env = TokenEnv(gym.make(GRID), tok, processor=qwen)
    env.reset(options=TASK)
    env.step(turn("qwen3.5", tok, "right"))
    plain = completion("qwen3.5", (), content="Thinking it over.", think="Hmm.")
    obs, *_ = env.step(list(tok(plain, add_special_tokens=False)["input_ids"]))
    traj = env.trajectory
    assert len(traj.rows) == 2 and [len(r.images) for r in traj.rows] == [2, 2]
    assert obs == processor_ids(qwen, traj)
    pad = pad_of("qwen3.5", tok)
    for row in traj.rows:  # each row's placeholder runs are its images', in order
        spans = row.multi_modal_data.mm_placeholders["image"]
        assert len(spans) == 2 and sum(s.length for s in spans) == row.ids.count(pad)
    assert [traj.to_verl(k)["multi_modal_data"]["images"] for k in (0, 1)] == [
        traj.rows[0].images, traj.rows[1].images]


def test_qwen25_vl_is_served_by_its_template_and_expanded_as_its_processor_does() -> None:
    """Qwen2.5-VL (no renderer): the processor's chat template renders, each image's single
    pad expands to the processor's run; one row, every step."""
    from _tiny_lm import tiny_tokenizer

    tok = tiny_tokenizer()
    tok.add_tokens(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
                   special_tokens=True)
    proc = qwen_processor(tok, "Qwen2_5_VLProcessor", template=chat_template_trl("qwen2_5_vl"))
    env = TokenEnv(gym.make(GRID), tok, processor=proc)
    obs, info = env.reset(options=TASK)
    traj = env.trajectory
    assert info["renderer"] == "template+processor" and obs == processor_ids(proc, traj)
    call = '<tool_call>\n{"name": "move", "arguments": {"direction": "right"}}\n</tool_call>'
    end = tok.convert_tokens_to_ids("<|im_end|>")
    ids = [*tok(call, add_special_tokens=False)["input_ids"], end]
    new, *_ = env.step(ids)
    assert new[: len(obs)] == obs and len(traj.rows) == 1 and len(traj.rows[0].images) == 2
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    spans = traj.rows[0].multi_modal_data.mm_placeholders["image"]
    assert [new[s.offset: s.offset + s.length].count(pad) for s in spans] == [s.length
                                                                               for s in spans]
    assert new == processor_ids(proc, traj)


def chat_template_trl(name: str) -> str:
    from pathlib import Path

    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()


# -- the batch and the awaited env take the processor too ---------------------------------


def test_the_batch_and_the_async_env_take_processor(qwen: Any, grid_url: str) -> None:
    import asyncio

    from ors_gym import AsyncOrsEnv

    tok = qwen.tokenizer
    with TokenBatch(tok, processor=qwen) as batch:
        rows = [{"env_id": GRID, "env_kwargs": {"base_url": grid_url}, "task_spec": spec}
                for spec in (TASK["task_spec"], {**TASK["task_spec"], "start": [1, 1]})]
        prompts, _ = batch.reset(rows)
        obs, *_ = batch.step([turn("qwen3.5", tok, "right")] * 2)
        for k, traj in enumerate(batch.trajectories):
            assert obs[k][: len(prompts[k])] == prompts[k] and len(traj.rows[0].images) == 2
            assert obs[k] == processor_ids(qwen, traj)
        first, second = (t.rows[0].images for t in batch.trajectories)
        assert first[1].tobytes() != second[1].tobytes()  # each episode its own frames
        # one bridge serves both: each row hands it its own image data at each step
        assert all(e.bridge is batch.core.bridge for e in batch.core._episodes)

    async def run() -> Any:
        async with AsyncTokenEnv(AsyncOrsEnv(env_class=GridWorld), qwen) as env:
            await env.reset(options=TASK)
            await env.step(turn("qwen3.5", tok, "down"))
            return env.trajectory

    traj = asyncio.run(run())
    assert len(traj.rows[0].images) == 2 and traj.ids == processor_ids(qwen, traj)


def test_the_bridge_memo_never_mixes_a_processor_in(qwen: Any) -> None:
    """The bridge choice is memoised per tokenizer; a processor bypasses the memo, so a
    text-only choice made first does not serve a processor, nor the reverse."""
    tok = qwen.tokenizer
    assert not TokenEnv(gym.make(GRID), tok).bridge.multimodal
    assert TokenEnv(gym.make(GRID), tok, processor=qwen).bridge.multimodal
    assert not TokenEnv(gym.make(GRID), tok).bridge.multimodal


# -- the budget counts images ----------------------------------------------------------------


def test_an_image_over_the_budget_ends_the_episode_and_is_not_recorded(qwen: Any) -> None:
    tok = qwen.tokenizer
    probe = TokenEnv(gym.make(GRID), qwen)
    prompt, _ = probe.reset(options=TASK)
    sampled = turn("qwen3.5", tok, "right")
    full, *_ = probe.step(sampled)
    cap = len(full) - len(prompt) - 1  # the step's ids without its image's last pad
    env = TokenEnv(gym.make(GRID), qwen, max_tokens=cap)
    env.reset(options=TASK)
    obs, _, _, truncated, info = env.step(sampled)
    traj = env.trajectory
    assert truncated and info["stop_reason"] == stops.MAX_TOKENS
    assert obs == prompt + sampled and len(traj.rows[0].images) == 1  # the frame not in
    assert len(traj.rows[0].multi_modal_data.mm_placeholders["image"]) == 1
    assert traj.to_verl()["multi_modal_data"]["images"] == traj.rows[0].images


def test_a_new_rows_prompt_counts_against_the_budget(qwen: Any) -> None:
    tok = qwen.tokenizer
    plain = list(tok(completion("qwen3.5", (), content="Hmm.", think="Hmm."),
                     add_special_tokens=False)["input_ids"])
    env = TokenEnv(gym.make(GRID), qwen, max_tokens=len(plain) + 20)
    prompt, _ = env.reset(options=TASK)
    obs, _, _, truncated, info = env.step(plain)  # the nudge's new row: over the budget
    traj = env.trajectory
    assert truncated and info["stop_reason"] == stops.MAX_TOKENS and len(traj.rows) == 1
    assert obs[: len(prompt)] == prompt and len(traj.rows[0].images) == 1


# -- refusals and the text note ----------------------------------------------------------


def test_a_text_family_refuses_a_processor_by_name(qwen: Any) -> None:
    qwen3 = family_tokenizer("qwen3")
    with pytest.raises(ValueError, match=r"processor=Qwen3VLProcessor .*'qwen3'.* text only"):
        TokenEnv(gym.make(GRID), qwen3, processor=qwen)
    with pytest.raises(ValueError, match=r"processor=Qwen3VLProcessor .*'qwen3'"):
        TokenEnv(gym.make(GRID), qwen.tokenizer, processor=qwen, renderer="qwen3")
    with pytest.raises(TypeError, match="processor= takes a multimodal processor"):
        TokenEnv(gym.make(GRID), qwen.tokenizer, processor=qwen.tokenizer)
    other = qwen_processor(qwen.tokenizer)
    with pytest.raises(ValueError, match="passed as the tokenizer and another as processor="):
        TokenEnv(gym.make(GRID), qwen, processor=other)


def test_a_vision_family_without_processor_reads_the_note_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hub-named Qwen3.5 tokenizer with no processor: the note, a WARNING naming
    processor=, and no processor fetched (the hub is not reachable here)."""
    tok = family_tokenizer("qwen3.5", local=False)
    assert tok.name_or_path == "Qwen/Qwen3.5-9B"
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        env = TokenEnv(gym.make(GRID), tok)
        obs, info = env.reset(options=TASK)
        env.step(turn("qwen3.5", tok, "right"))
    assert not env.bridge.multimodal and info["renderer"] == "renderers:qwen3.5"
    assert "[1 image(s) not shown" in tok.decode(obs)
    assert env.trajectory.rows[0].images == [] and "multi_modal_data" not in \
        env.trajectory.to_verl()
    assert len(env.trajectory.images) == 2  # the frames the environment sent, kept
    assert any("processor=" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING) or _said_before()


def _said_before() -> bool:
    """The warning is said once per process: another test may have said it first."""
    from ors_gym.families import _said  # type: ignore[attr-defined]

    return any("no processor was given" in m for m in _said)


def test_the_qwen35_template_renders_images_inside_tool_messages() -> None:
    """The family templates put a tool result's images in its tool message: what makes
    the episodes append-only (not a user turn, which Qwen3.5 reads as a new query)."""
    assert "<|vision_start|>" in chat_template("qwen3.5")


def test_trainers_that_cannot_take_images_say_so(qwen: Any) -> None:
    """SkyRL's output has no image field and TRL's rollout_func cannot hand images to the
    trainer's forward pass: a vision row, or a processor, is refused with the way out."""
    import asyncio

    from ors_gym.skyrl import generate
    from ors_gym.trl._token_rollout import TokenRollouts

    env = TokenEnv(gym.make(GRID), qwen)
    env.reset(options=TASK)
    with pytest.raises(ValueError, match="SkyRL's GeneratorOutput has no field for images"):
        env.trajectory.to_skyrl()
    with pytest.raises(ValueError, match="SkyRL's GeneratorOutput has no field for images"):
        asyncio.run(generate([], qwen, lambda p, b: [], max_tokens=8))
    with pytest.raises(ValueError, match="rollout_func cannot hand images"):
        TokenRollouts({}, "train", {"processor": qwen})


def test_qwen3_vl_is_told_from_its_template_and_served_by_its_renderer() -> None:
    """A Qwen3-style template that writes vision tokens, with a processor: Qwen3-VL's
    renderer (found, not asked for), its ids the processor's, one row."""
    from _tiny_lm import tiny_tokenizer

    tok = tiny_tokenizer(chat_template_trl("qwen3_vl"))
    tok.add_tokens(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
                   special_tokens=True)
    proc = qwen_processor(tok)
    env = TokenEnv(gym.make(GRID), tok, processor=proc)
    obs, info = env.reset(options=TASK)
    assert info["renderer"] == "renderers:qwen3-vl"
    call = '<tool_call>\n{"name": "move", "arguments": {"direction": "right"}}\n</tool_call>'
    new, *_ = env.step([*tok(call, add_special_tokens=False)["input_ids"],
                        tok.convert_tokens_to_ids("<|im_end|>")])
    traj = env.trajectory
    assert new[: len(obs)] == obs and len(traj.rows) == 1 and len(traj.rows[0].images) == 2
    assert new == processor_ids(proc, traj)
