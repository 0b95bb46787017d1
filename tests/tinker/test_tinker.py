"""Tinker: ORS episodes run by tinker-cookbook's own rollout code, through its own renderer.

``do_group_rollout`` and ``do_single_rollout`` are tinker-cookbook's, and so are
the renderer (``qwen3``, over a tiny Qwen3-style tokenizer registered with
tinker-cookbook's ``register_tokenizer``) and the ``EnvFromMessageEnv`` the
episodes run in. Only the sampler is a stand-in: the Tinker service cannot be
reached from the test machines, so a ``TokenCompleter`` over a tiny local
model answers (scripted completions with the model's own logprobs of them, or
sampled ones). The bundled environments run in this process.

Needs tinker-cookbook, which cannot share the suite's venv:
``bash scripts/tinker-venv.sh --test`` builds its venv once and runs this file
there; elsewhere it skips.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip(
    "tinker_cookbook.rl.rollouts",
    reason="tinker-cookbook has a venv of its own: bash scripts/tinker-venv.sh --test",
)
pytest.importorskip("trl")  # tests/_tiny_lm.py takes TRL's Qwen3 chat template

import gymnasium as gym
import tinker
import torch
from _tiny_lm import answer_text, encode, tiny_model, tiny_tokenizer, tool_call_text
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.rollouts import do_group_rollout, do_single_rollout
from tinker_cookbook.tokenizer_utils import register_tokenizer

import ors_gym
from ors_gym.actions import parse_action
from ors_gym.tinker import (
    TINKER_STOP_REASONS,
    OrsDatasetBuilder,
    OrsEnvGroupBuilder,
    OrsTinkerEnv,
)
from ors_gym.tokens import shared_pool, stops

TOKENIZER = "ors-gym-tests/tiny-qwen3"
COUNTER, JUDGED = "ors/Counter-v0", "ors/Judged-v0"


@pytest.fixture(scope="module")
def tok() -> Any:
    # the renderer's own instance: it encodes in worker threads while the sampler encodes here
    rendering = tiny_tokenizer()
    register_tokenizer(TOKENIZER, lambda: rendering)
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok: Any) -> Any:
    return tiny_model(tok).eval()


#: A script: (the episode's prompt text, its turn) -> the completion's text, or None to sample.
Script = Callable[[str, int, int], str | None]


class TinyCompleter(TokenCompleter):
    """A local ``TokenCompleter``: each call plays ``script`` (given the prompt, the turn, and
    which episode this is, numbered by first turn), ending the text with ``<|im_end|>``, with
    the tiny model's logprobs of those ids; where the script gives None, the model samples."""

    def __init__(self, model: Any, tok: Any, script: Script, sample_tokens: int = 8) -> None:
        self.model, self.tok, self.script = model, tok, script
        self.sample_tokens = sample_tokens
        self.episodes = 0
        self.first: dict[int, str] = {}
        self.calls: list[list[int]] = []

    async def __call__(
        self, model_input: tinker.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        prompt = model_input.to_ints()
        text = self.tok.decode(prompt)
        turn = text.count("<|im_start|>assistant")
        if turn == 1:
            self.episodes += 1
            episode = self.episodes
        else:  # the episode whose first reply this prompt holds
            episode = next(e for e, first in self.first.items() if first in text)
        reply = self.script(text, turn, episode)
        end = self.tok.convert_tokens_to_ids("<|im_end|>")
        assert stop == [end]  # the renderer's stop condition reached the sampler
        with torch.no_grad():
            if reply is None:
                out = self.model.generate(
                    torch.tensor([prompt]), do_sample=True, top_k=0,
                    max_new_tokens=self.sample_tokens, eos_token_id=end,
                )
                ids = out[0, len(prompt):].tolist()
            else:
                ids = [*encode(self.tok, reply), end]
            logits = self.model(torch.tensor([prompt + ids])).logits[0]
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), dim=-1)
        lps = logp[torch.arange(len(ids)), torch.tensor(ids)].tolist()
        self.calls.append(ids)
        self.first.setdefault(episode, self.tok.decode([t for t in ids if t != end]))
        reason = "stop" if ids and ids[-1] == end else "length"
        return TokensWithLogprobs(tokens=ids, maybe_logprobs=lps, stop_reason=reason)


def _counter_task(low: int, high: int) -> tuple[int, int]:
    """The first Counter train task whose target is in [low, high]: (index, target)."""
    env = gym.make(COUNTER)
    try:
        for index in range(50):
            target = int(env.unwrapped.task(index, "train")["target"])  # type: ignore[attr-defined]
            if low <= target <= high:
                return index, target
    finally:
        env.close()
    raise AssertionError("no such task")


def _group(env_id: str, index: int, size: int, **kwargs: Any) -> OrsEnvGroupBuilder:
    return OrsEnvGroupBuilder(
        env_id=env_id, options={"split": "train", "index": index}, group_size=size,
        model_name_for_tokenizer=TOKENIZER, renderer_name="qwen3_disable_thinking", **kwargs,
    )


def _replayed_rewards(tok: Any, env_id: str, index: int, actions: list[list[int]]) -> list[float]:
    """The rewards ``gym.make(env_id)`` gives the same completions, read by ors_gym's own
    text parser (Qwen3's format is Hermes')."""
    env = gym.make(env_id)
    try:
        env.reset(options={"split": "train", "index": index})
        rewards = []
        for ids in actions:
            text = tok.decode(ids, skip_special_tokens=True)
            rewards.append(float(env.step(parse_action(text))[1]))
        return rewards
    finally:
        env.close()


def test_tinker_stop_reasons_map_every_shared_stop_reason() -> None:
    assert TINKER_STOP_REASONS is stops.TINKER
    assert set(TINKER_STOP_REASONS) == set(stops.STOP_REASONS)
    assert TINKER_STOP_REASONS[stops.ENV_ENDED] == "tool_stopped"
    assert not hasattr(ors_gym.tinker, "STOP_REASONS")  # the tuple's name is tokens.stops'


def test_counter_group_through_tinker_rollout(tok: Any, model: Any) -> None:
    """Two episodes of one Counter task: one increments to the target then calls done
    (reward 1), one calls done at once (reward 0); the ids, the rewards and the stops are
    the environment's, its replies rendered by tinker's renderer."""
    index, target = _counter_task(1, 5)

    def script(prompt: str, turn: int, episode: int) -> str | None:
        if episode == 1 and turn == 1:
            return tool_call_text("increment", {"amount": target})
        return tool_call_text("done", {})

    completer = TinyCompleter(model, tok, script)
    builder = pickle.loads(pickle.dumps(_group(COUNTER, index, 2, system_prompt="episode 1")))
    group = asyncio.run(do_group_rollout(builder, completer))

    assert builder.backend is not None and builder.backend.open_sessions == frozenset()
    by_length = sorted(group.trajectories_G, key=lambda t: len(t.transitions))
    short, long = by_length
    assert [len(short.transitions), len(long.transitions)] == [1, 2]
    # the trajectories hold the ids the sampler gave, verbatim, with its logprobs
    assert sorted(tuple(t.ac.tokens) for tr in by_length for t in tr.transitions) == sorted(
        map(tuple, completer.calls)
    )
    assert all(len(t.ac.logprobs) == len(t.ac.tokens) for tr in by_length for t in tr.transitions)
    # the environment's rewards, as a plain gym env gives them for the same completions
    for tr in by_length:
        actions = [t.ac.tokens for t in tr.transitions]
        assert [t.reward for t in tr.transitions] == _replayed_rewards(tok, COUNTER, index, actions)
    assert group.get_total_rewards() == [1.0, 0.0] or group.get_total_rewards() == [0.0, 1.0]
    assert sum(t.reward for t in long.transitions) == 1.0
    # the env's reply, rendered by tinker's Qwen3 renderer as a tool response
    second = tok.decode(long.transitions[1].ob.to_ints())
    assert f"<tool_response>\nThe counter is now {target}.\n</tool_response>" in second
    # stops: done is the environment's terminal tool, called by a tool call
    assert short.stop_reason == long.stop_reason == "tool_stopped"
    assert long.transitions[-1].metrics["stop/tool_stopped"] == 1.0
    assert long.transitions[-1].metrics["ors_return"] == 1.0
    assert "stop/tool_stopped" not in long.transitions[0].metrics
    assert group.final_rewards_G == [0.0, 0.0]  # Counter scores no groups


def test_sessions_are_given_back_when_each_episode_ends(tok: Any, model: Any) -> None:
    """Each episode's session is deleted when it ends, before the group's cleanup: ended by
    the environment, by a sampler length stop (tinker's max_tokens), or by a call the
    renderer could not read (the agent is told, in its own format)."""
    index, _ = _counter_task(1, 5)

    def script(prompt: str, turn: int, episode: int) -> str | None:
        if episode == 1:
            return tool_call_text("done", {})
        if episode == 2:
            return None  # sampled: a few tokens, no <|im_end|>
        if turn == 1:
            return '<tool_call>\n{"name": "increment", "arguments": {"amount": 1\n</tool_call>'
        return tool_call_text("done", {})

    async def run() -> None:
        completer = TinyCompleter(model, tok, script, sample_tokens=4)
        builder = _group(COUNTER, index, 3, system_prompt="episode 1")
        envs = await builder.make_envs()
        backend: Any = builder.backend
        try:
            trajectories = []
            for env in envs:
                assert isinstance(env, OrsTinkerEnv)
                trajectories.append(await do_single_rollout(completer, env))
                assert backend.open_sessions == frozenset()
            ended, sampled, misread = trajectories
            assert ended.stop_reason == "tool_stopped"
            assert sampled.stop_reason == "max_tokens"  # tinker's own length handling
            assert sampled.transitions[-1].metrics["stop/max_tokens"] == 1.0
            assert misread.transitions[0].metrics["parse_error"] == 1.0
            told = tok.decode(misread.transitions[1].ob.to_ints())
            assert "could not be read" in told and '"amount": 1' in told
            assert misread.stop_reason == "tool_stopped"
        finally:
            await builder.cleanup()

    asyncio.run(run())


def test_a_lost_session_ends_its_episode_with_env_error(tok: Any, model: Any) -> None:
    """A session lost between two turns (deleted behind the episode's back) ends that
    episode with tinker's ``stop/env_error``, not an exception failing the whole group."""
    index, _ = _counter_task(2, 5)

    def script(prompt: str, turn: int, episode: int) -> str | None:
        return tool_call_text("increment", {"amount": 1})

    class Losing(TokenCompleter):
        """Samples, then deletes the first episode's session before its step."""

        def __init__(self, env: OrsTinkerEnv) -> None:
            self.inner, self.env = TinyCompleter(model, tok, script), env

        async def __call__(self, model_input: tinker.ModelInput, stop: StopCondition, *,
                           max_tokens: int | None = None) -> TokensWithLogprobs:
            out = await self.inner(model_input, stop, max_tokens=max_tokens)
            ors = self.env.message_env.env
            if ors.session_id is not None:
                await ors.backend.delete_session(ors.session_id)
            return out

    async def run() -> Any:
        builder = _group(COUNTER, index, 2, system_prompt="episode 1")
        envs = await builder.make_envs()
        try:
            first = envs[0]
            assert isinstance(first, OrsTinkerEnv)
            lost = await do_single_rollout(Losing(first), first)
            done = TinyCompleter(model, tok, lambda *_: tool_call_text("done", {}))
            kept = await do_single_rollout(done, envs[1])
        finally:
            await builder.cleanup()
        return lost, kept

    lost, kept = asyncio.run(run())
    assert lost.stop_reason == "env_error" and len(lost.transitions) == 1
    assert lost.transitions[-1].metrics["stop/env_error"] == 1.0
    assert kept.stop_reason == "tool_stopped"  # the group's other episode went on


def test_groups_share_one_backend_per_environment_on_a_loop(tok: Any, model: Any) -> None:
    """Groups (pickled, as tinker-cookbook may send them) of one environment open their
    episodes over one backend of the event loop's: one discovery, one pool, not one a group."""
    index, _ = _counter_task(1, 5)
    completer = TinyCompleter(model, tok, lambda *_: tool_call_text("done", {}))

    async def run() -> tuple[Any, Any, int]:
        groups = [pickle.loads(pickle.dumps(_group(COUNTER, index, 2, system_prompt=f"g{k}")))
                  for k in range(2)]
        await asyncio.gather(*(do_group_rollout(g, completer) for g in groups))
        return groups[0].backend, groups[1].backend, shared_pool().made

    first, second, made = asyncio.run(run())
    assert first is second and made == 1
    assert first.open_sessions == frozenset()


def test_score_group_gives_the_group_rewards(tok: Any, model: Any) -> None:
    """On Judged (an environment that scores groups) the group's rewards are its
    ``score_group`` of the conversations: the answer with the keywords wins."""
    env = gym.make(JUDGED)
    try:
        task = env.unwrapped.task(0, "train")  # type: ignore[attr-defined]
    finally:
        env.close()
    good = " ".join([*task["keywords"], "and more words"] * 3)

    def script(prompt: str, turn: int, episode: int) -> str | None:
        return answer_text(good if episode == 1 else "No.")

    completer = TinyCompleter(model, tok, script)

    async def run() -> Any:
        train, _ = await OrsDatasetBuilder(
            env_id=JUDGED, batch_size=1, group_size=2, model_name_for_tokenizer=TOKENIZER,
            renderer_name="qwen3_disable_thinking", num_tasks=1, system_prompt="episode 1",
        )()
        (builder,) = train.get_batch(0)
        assert isinstance(builder, OrsEnvGroupBuilder) and builder.score_group
        return await do_group_rollout(pickle.loads(pickle.dumps(builder)), completer)

    group = asyncio.run(run())
    texts = [tok.decode(tr.transitions[0].ac.tokens) for tr in group.trajectories_G]
    scores = dict(zip(texts, group.final_rewards_G, strict=True))
    assert scores == {f"{good}<|im_end|>": 1.0, "No.<|im_end|>": 0.0}
    assert [m["ors_group_score"] for m in group.metrics_G] == group.final_rewards_G
    for tr in group.trajectories_G:
        assert tr.stop_reason == "completed"  # a plain reply, graded by the terminal tool
        assert tr.transitions[0].reward == tr.transitions[0].metrics["ors_return"]


def test_reward_parts_and_the_policy_version_reach_the_metrics(tok: Any) -> None:
    """Latency returns named reward parts with each call: the episode's sums are metrics
    of its last transition; a step's ``extra["policy_version"]`` is that step's metric."""
    from ors_gym.envs.testing import register_test_envs

    register_test_envs()
    spec = {"delay_ms": 0, "length": 2, "reward_parts": {"correct": 1.0, "format": 0.25}}
    builder = OrsEnvGroupBuilder(
        env_id="ors/Latency-v0", options={"task_spec": spec}, group_size=1,
        model_name_for_tokenizer=TOKENIZER, renderer_name="qwen3_disable_thinking")
    wait = [*encode(tok, tool_call_text("wait", {})), tok.convert_tokens_to_ids("<|im_end|>")]

    async def run() -> list[Any]:
        (env,) = await builder.make_envs()
        try:
            await env.initial_observation()
            first = await env.step(wait, extra={"stop_reason": "stop", "policy_version": 4})
            last = await env.step(wait, extra={"stop_reason": "stop"})
            return [first, last]
        finally:
            await builder.cleanup()

    first, last = asyncio.run(run())
    assert first.metrics["policy_version"] == 4.0 and not first.episode_done
    assert last.episode_done and "policy_version" not in last.metrics
    assert last.metrics["reward_parts/correct"] == 2.0
    assert last.metrics["reward_parts/format"] == 0.5


def test_dataset_builder_batches_every_task_of_each_env(tok: Any) -> None:
    """Environment ids, split, batch and group size as tinker's builders take them; every
    task once, shuffled; a test split of single attempts; batches that pickle."""

    async def run() -> Any:
        return await OrsDatasetBuilder(
            env_id=[COUNTER, "ors/Math-v0"], batch_size=4, group_size=3, num_tasks=5,
            model_name_for_tokenizer=TOKENIZER, renderer_name="qwen3", test_split="test",
        )()

    train, test = asyncio.run(run())
    builders = [b for i in range(len(train)) for b in train.get_batch(i)]
    assert len(train) == 3 and len(builders) == 10
    assert sorted((b.env_id, b.options["index"]) for b in builders) == sorted(
        (e, i) for e in (COUNTER, "ors/Math-v0") for i in range(5)
    )
    assert [b.env_id for b in builders] != [COUNTER] * 5 + ["ors/Math-v0"] * 5  # shuffled
    assert {b.group_size for b in builders} == {3} and not any(b.score_group for b in builders)
    assert test is not None and {b.group_size for b in test.builders} == {1}
    assert {b.options["split"] for b in test.builders} == {"test"}
    assert pickle.loads(pickle.dumps(train.get_batch(0))) == train.get_batch(0)
    with pytest.raises(ValueError, match="unknown environment id"):
        asyncio.run(
            OrsDatasetBuilder(env_id="ors/Nope-v0", batch_size=1, group_size=1,
                              model_name_for_tokenizer=TOKENIZER, renderer_name="qwen3")()
        )


def test_import_ors_gym_does_not_import_tinker() -> None:
    import subprocess
    import sys

    code = "import sys, ors_gym; print('tinker_cookbook' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert ors_gym.__version__


def test_a_vision_renderer_gets_each_frame_inside_its_tool_response() -> None:
    """tinker-cookbook's Qwen3-VL renderer, built with an image processor, gets GridWorld's
    frames as image parts (the opening one in the task, each move's inside its tool
    message), rendered as image chunks."""
    import transformers
    from tinker_cookbook.renderers.qwen3 import Qwen3VLRenderer

    from ors_gym import AsyncOrsEnv
    from ors_gym.envs import GridWorld
    from ors_gym.tinker.env import OrsMessageEnv

    vl = tiny_tokenizer()
    vl.add_tokens(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
                  special_tokens=True)
    images = getattr(transformers, "Qwen2VLImageProcessorPil", None) or \
        transformers.Qwen2VLImageProcessor
    renderer = Qwen3VLRenderer(vl, image_processor=images(min_pixels=28 * 28,
                                                           max_pixels=112 * 112))
    task = {"task_spec": {"size": 2, "start": [0, 0], "goal": [1, 1], "cell_px": 28}}

    async def run() -> tuple[list[Any], Any, Any]:
        env = OrsMessageEnv(AsyncOrsEnv(env_class=GridWorld), renderer, options=task)
        history = list(await env.initial_observation())
        first = renderer.build_generation_prompt(history)
        call = tool_call_text("move", {"direction": "right"})
        message, _ = renderer.parse_response([*encode(vl, call), vl.eos_token_id])
        result = await env.step(message)
        second = renderer.build_generation_prompt(result.next_messages)
        await env.end()
        return result.next_messages, first, second

    messages, first, second = asyncio.run(run())
    kinds = [type(c).__name__ for c in second.chunks]
    assert sum(type(c).__name__ == "ImageChunk" for c in first.chunks) == 1
    assert kinds.count("ImageChunk") == 2
    tool = messages[-1]
    assert tool["role"] == "tool" and [p["type"] for p in tool["content"]] == ["text", "image"]
    assert "not shown" not in str(messages)
