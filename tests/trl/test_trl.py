"""TRL: ``OrsSpec`` under a real ``GRPOTrainer``, with a tiny model built here (no download).

The tokenizer is a byte-level BPE trained on local text with TRL's own bundled
Qwen3 chat template (TRL recognises templates only by exact match); the model a
two-layer Qwen3 with random weights, warmed up on the tool-call format so that
rollout rewards vary. One trainer run covers a mixed run over two environments,
QA's terminal tool, the logged rewards against the environments' own grading,
and changed weights.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import inspect
import random
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from openreward.environments import ToolOutput, tool

from ors_gym.envs.counter import Counter, IncrementInput
from ors_gym.trl import ENDED_TEXT, OrsRollout, OrsSpec, ors_reward

# TRL, transformers and torch are imported by the tests that use them, not at collection: a
# worker that runs none of this file's tests never pays for importing them.
if importlib.util.find_spec("trl") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs the trl extra: pip install 'ors-gym[trl]'", allow_module_level=True)

QA, GRID = "ors/QA-v0", "ors/GridWorld-v0"


def tools_of(instance: OrsRollout) -> dict[str, Any]:
    """What TRL offers the model: the class's public functions other than reset/get_reward."""
    return {
        getattr(instance, n).__name__: getattr(instance, n)
        for n, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if n not in ("reset", "get_reward") and not n.startswith("_")
    }


# -- the spec and its instances, without a trainer --------------------------------------------


@pytest.mark.parametrize("env_id", ["ors/Counter-v0", "ors/Echo-v0", GRID, "ors/Math-v0"])
def test_generated_tools_give_back_the_environments_schemas(env_id: str) -> None:
    from transformers.utils import get_json_schema

    spec = OrsSpec(env_id, num_tasks=1)
    instance = spec.environment_factory()
    env = gym.make(env_id).unwrapped
    try:
        listed = {t["function"]["name"]: t["function"] for t in env.tools_as("openai")}
    finally:
        env.close()
    tools = tools_of(instance)
    assert set(tools) == set(listed)
    for name, function in tools.items():
        got = get_json_schema(function)["function"]
        want = listed[name]
        assert got["name"] == name
        assert got["description"] == want["description"]
        props = want["parameters"].get("properties", {})
        assert set(got["parameters"]["properties"]) == set(props)
        assert set(got["parameters"].get("required", [])) == set(
            want["parameters"].get("required", []))
        for pname, p in props.items():
            g = got["parameters"]["properties"][pname]
            assert g["type"] == p["type"], (name, pname)
            assert g["description"] == p["description"], (name, pname)
            assert g.get("enum") == p.get("enum"), (name, pname)


def test_arrays_enums_and_nullable_parameters_survive_the_round_trip() -> None:
    from transformers.utils import get_json_schema

    from ors_gym.trl._tools import tool_function

    schema = {"type": "object", "required": ["tags"], "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Labels."},
        "mode": {"enum": ["a", "b"], "type": "string", "description": "Which mode."},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None,
                  "description": "At most this many\n  (or none)."},
    }}
    calls: list[dict[str, Any]] = []
    function = tool_function("find-items", "Find items.", schema,
                             lambda self, name, args: calls.append({name: args}) or "ok")
    assert function is not None
    got = get_json_schema(function)["function"]
    assert got["name"] == "find-items" and got["description"] == "Find items."
    props = got["parameters"]["properties"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"},
                             "description": "Labels."}
    assert props["mode"]["enum"] == ["a", "b"]
    assert props["limit"]["type"] == "integer" and props["limit"].get("nullable") is True
    assert props["limit"]["description"] == "At most this many (or none)."
    assert got["parameters"]["required"] == ["tags"]
    assert function(None, tags=["x"]) == "ok" and calls == [{"find-items": {"tags": ["x"]}}]


def test_the_terminal_tool_grades_the_final_reply_and_is_no_method() -> None:
    spec = OrsSpec(QA, indices=[0, 1])
    assert spec.train_dataset["task_index"] == [0, 1]
    assert "environment" not in spec.train_dataset.column_names
    qa = spec.environment_factory()
    assert set(tools_of(qa)) == {"hint"}  # `answer` is the hidden terminal tool
    prompt = qa.reset(task_index=0, prompt=[{"role": "user", "content": ""}])
    assert prompt.startswith("What is the capital of France?")
    assert qa.hint() == "The answer starts with 'P'."
    done = [{"role": "assistant", "content": "Paris"}]
    assert ors_reward(prompts=[[]], completions=[done], environments=[qa]) == [1.0]
    assert qa.finished and qa.rewards == [0.0, 1.0]
    assert qa.hint() == ENDED_TEXT  # the episode has ended: nothing more runs
    assert ors_reward(completions=[done], environments=[qa]) == [1.0]  # graded once
    qa.reset(task_index=1)
    wrong = [{"role": "assistant", "content": "Paris"}]
    assert ors_reward(completions=[wrong], environments=[qa]) == [0.0]
    assert ors_reward(completions=[wrong], environments=[object()]) == [None]


def test_sessions_end_at_the_next_reset_and_when_dropped(server: Any) -> None:
    def live() -> set[str]:
        return set(server.sdk_server._active_envs)

    before = live()
    spec = OrsSpec({"ors/Remote-v0": {"base_url": server.url, "env_name": "counter"}},
                   num_tasks=2)
    assert spec.train_dataset["environment"] == ["ors/Remote-v0"] * 2
    factory = spec.environment_factory["ors/Remote-v0"]  # type: ignore[index]
    assert live() == before  # discovery's session is gone
    rollout = factory()
    rollout.reset(task_index=0)
    first = live() - before
    assert len(first) == 1
    assert rollout.increment() == "The counter is now 1."
    with pytest.raises(TypeError, match=r"tool .increment.: .*amont.*it takes amount"):
        rollout.increment(amont=2)
    rollout.reset(task_index=1)
    assert len(live() - before) == 1 and not (live() & first)
    del rollout
    from ors_gym import _cleanup

    assert _cleanup.flush()
    assert live() == before


def test_images_reach_a_multimodal_model_as_image_parts() -> None:
    text_only = OrsSpec(GRID, num_tasks=1).environment_factory()
    assert "image(s) not shown" in text_only.reset(task_index=0)
    vision = OrsSpec(GRID, num_tasks=1, multimodal=True).environment_factory()
    parts = vision.reset(task_index=0)
    assert [p["type"] for p in parts] == ["image", "text"]
    assert parts[0]["image"].size == (160, 160)
    assert [p["type"] for p in vision.move(direction="down")][-1] == "text"


def test_rows_come_from_the_spec_split() -> None:
    spec = OrsSpec(QA, split="test", indices=[0])
    rollout = spec.environment_factory()
    assert rollout.reset(task_index=0).startswith("What is the capital of Germany?")
    rollout.env.close()


def test_bad_arguments_are_explained() -> None:
    with pytest.raises(ValueError, match="num_tasks or indices"):
        OrsSpec(QA, num_tasks=1, indices=[0])
    with pytest.raises(ValueError, match=r"out of range.*20 tasks"):
        OrsSpec(QA, indices=[25])
    with pytest.raises(ValueError, match="names a part twice"):
        OrsSpec(QA, num_tasks=1, reward_parts=["a", "a"])
    with pytest.raises(TypeError, match="list of names"):
        OrsSpec(QA, num_tasks=1, reward_parts="a")


def test_without_environments_ors_reward_gives_none_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="ors_gym"):
        assert ors_reward(completions=[[], []]) == [None, None]
        assert ors_reward(completions=[[]]) == [None]
    assert sum("got neither TRL's environments" in r.getMessage() for r in caplog.records) <= 1


def test_get_reward_owns_the_return_unless_a_reward_function_counted_it() -> None:
    spec = OrsSpec(QA, indices=[0])
    qa = spec.environment_factory()
    done = [{"role": "assistant", "content": "Paris"}]
    # GRPOTrainer: ors_reward grades the final reply and counts the return; get_reward
    # then gives None (TRL adds its column too) and gives the session back.
    qa.reset(task_index=0)
    assert ors_reward(completions=[done], environments=[qa]) == [1.0]
    assert qa.env.session_id is not None
    assert asyncio.run(qa.get_reward()) is None
    assert qa.env.session_id is None
    # A fresh episode on a fresh session; get_reward alone owns the return.
    qa.reset(task_index=0)
    assert qa.reward == 0.0 and not qa.finished and qa.env.session_id is not None
    assert asyncio.run(qa.get_reward()) == 0.0  # the reply never reached it: return so far
    assert qa.env.session_id is None
    assert asyncio.run(qa.get_reward()) is None  # given once
    assert ors_reward(completions=[done], environments=[qa]) == [None]  # get_reward gave it
    # The terminal tool offered as a tool, for AsyncGRPOTrainer's loop.
    offered = OrsSpec(QA, indices=[0], terminal_as_tool=True).environment_factory()
    assert set(tools_of(offered)) == {"hint", "answer"}
    offered.reset(task_index=0)
    offered.answer(answer="Paris")
    assert offered.finished and asyncio.run(offered.get_reward()) == 1.0
    # Counter's terminal tool takes no input: get_reward grades it from state.
    counter = OrsSpec("ors/Counter-v0", indices=[12]).environment_factory()
    counter.reset(task_index=12)
    target = counter.env.task(12)["target"]
    counter.increment(amount=target)
    assert asyncio.run(counter.get_reward()) == 1.0 and counter.finished


class PartsCounter(Counter):
    """Counter whose ``increment`` also returns reward parts."""

    @tool
    async def increment(self, params: IncrementInput) -> ToolOutput:
        """Add 1 to 5 (default 1) to the counter."""
        self.value += params.amount
        out = self._moved()
        out.metadata = {**(out.metadata or {}), "reward_parts": {"progress": 0.25, "effort": -0.1}}
        return out


def _parts_counter() -> str:
    from ors_gym import register_class

    return register_class(PartsCounter, env_id="ors/PartsCounter-v0")


def test_reward_parts_are_columns_read_from_the_episode() -> None:
    from ors_gym.trl import RewardPart

    spec = OrsSpec(_parts_counter(), indices=[12], reward_parts=["progress", "done"])
    assert spec.reward_funcs == [RewardPart("progress"), RewardPart("done")]
    assert [f.__name__ for f in spec.reward_funcs] == ["ors_reward/progress", "ors_reward/done"]
    counter = spec.environment_factory()
    counter.reset(task_index=12)
    counter.increment(amount=1)
    counter.increment(amount=1)
    assert counter.reward_parts == {"progress": 0.5, "effort": -0.2}
    progress, done = spec.reward_funcs
    reply = [{"role": "assistant", "content": "Done."}]
    assert progress(completions=[reply], environments=[counter]) == [0.5]
    assert done(completions=[reply], environments=[counter]) == [0.0]  # a part never returned
    assert counter.finished  # the final reply was graded before the parts were read
    assert asyncio.run(counter.get_reward()) is None  # the parts counted it: no double count
    assert counter.env.session_id is None
    assert progress(completions=[reply]) == [None]  # AsyncGRPOTrainer: no environments


# -- a real GRPOTrainer run ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A tokenizer, a warmed-up tiny Qwen3 model and the spec it was warmed up on.

    Torch runs on one intra-op thread while the module's trainer tests run: a model
    this small gains little from a second thread, and two threads spin against each
    other whenever the machine's cores are busy with anything else.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _build_tiny(tmp_path_factory)
    finally:
        torch.set_num_threads(threads)


def _build_tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    from trl.chat_template_utils import qwen3_chat_template

    torch.manual_seed(0)
    random.seed(0)
    spec = OrsSpec([QA, GRID], indices=[0])
    qa, grid = (spec.environment_factory[k]() for k in (QA, GRID))  # type: ignore[index]
    examples = []
    for env, good, bad in (
        (qa, {"content": "Paris"}, {"content": "I do not know."}),
        (grid, {"content": "", "tool_calls": [{"type": "function", "function": {
            "name": "move", "arguments": {"direction": "down"}}}]}, {"content": "No move."}),
    ):
        prompt = [{"role": "user", "content": env.reset(task_index=0)}]
        for reply in (good, bad):
            examples.append((prompt, list(tools_of(env).values()), {"role": "assistant", **reply}))

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    raw = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()))
    raw.chat_template = qwen3_chat_template
    corpus = [raw.apply_chat_template([*p, a], tools=t, tokenize=False) for p, t, a in examples]
    bpe.train_from_iterator(corpus * 4, trainers.BpeTrainer(
        vocab_size=700, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, chat_template=qwen3_chat_template)
    assert tokenizer.decode(tokenizer(corpus[2])["input_ids"]) == corpus[2]  # round trip

    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    # Warm-up: next-token loss on the replies only, good and bad equally often, one batch.
    rows = []
    for prompt, tools, answer in examples:
        head = tokenizer.apply_chat_template(prompt, tools=tools, add_generation_prompt=True,
                                             tokenize=False, enable_thinking=False)
        whole = tokenizer.apply_chat_template([*prompt, answer], tools=tools, tokenize=False)
        ids = tokenizer(whole)["input_ids"]
        cut = len(tokenizer(head)["input_ids"])
        rows.append((ids, [-100] * cut + ids[cut:]))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
    mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(50):
        optimiser.zero_grad()
        model(input_ids=input_ids, attention_mask=mask, labels=labels).loss.backward()
        optimiser.step()
    qa.env.close()
    grid.env.close()
    return {"model": model, "tokenizer": tokenizer, "out": tmp_path_factory.mktemp("grpo")}


@pytest.mark.timeout(600)  # a shared machine may be slow; it takes well under that alone
def test_grpo_trains_on_a_mixed_run_with_rewards_from_the_environments(
    tiny: dict[str, Any],
) -> None:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    spec = OrsSpec([QA, GRID], indices=[0])
    seen: list[tuple[int, Any, str, bool, float | None]] = []
    step = [0]

    @functools.wraps(ors_reward)
    def recorded(completions: Any, environments: Any, **kwargs: Any) -> list[float | None]:
        rewards = ors_reward(completions=completions, environments=environments, **kwargs)
        for c, e, r in zip(completions, environments, rewards, strict=True):
            seen.append((step[0], c, type(e).__name__, e.finished, r))
        step[0] += 1
        return rewards

    model = tiny["model"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = GRPOConfig(
        output_dir=str(tiny["out"]), max_steps=2, per_device_train_batch_size=4,
        num_generations=2, max_completion_length=24, max_tool_calling_iterations=1,
        learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True, seed=0,
        save_strategy="no", temperature=1.0, chat_template_kwargs={"enable_thinking": False},
    )
    trainer = GRPOTrainer(
        model=model, processing_class=tiny["tokenizer"], args=args,
        train_dataset=spec.train_dataset, environment_factory=spec.environment_factory,
        reward_funcs=recorded,
    )
    trainer.train()

    # Both environments ran, and the logged rewards are the environments' returns.
    kinds = {kind for _, _, kind, _, _ in seen}
    assert kinds == {"Ors_ors_QA_v0", "Ors_ors_GridWorld_v0"}
    logged = [h["rewards/ors_reward/mean"] for h in trainer.state.log_history
              if "rewards/ors_reward/mean" in h]
    assert len(logged) == 2
    for k, value in enumerate(logged):
        mine = [r for s, *_, r in seen if s == k]
        assert value == pytest.approx(sum(mine) / len(mine), abs=1e-6)
    assert len({r for *_, r in seen}) > 1, "rewards never varied: nothing could learn"
    # TRL also calls each environment's get_reward (a column per class, weight 1): it gives
    # None once ors_reward counted the return, so the total is ors_reward's alone.
    for h in (h for h in trainer.state.log_history if "rewards/ors_reward/mean" in h):
        assert h["reward"] == pytest.approx(h["rewards/ors_reward/mean"], abs=1e-6)
        assert "rewards/Ors_ors_QA_v0/mean" in h
    # Every pooled instance gave its session back once scored.
    pooled = [e for pool in trainer._environment_pool.values() for e in pool]
    assert pooled and all(e.env.session_id is None for e in pooled)

    # A QA rollout the terminal tool ended, graded again by a fresh env from its final reply.
    _, qa_completion, _, _, qa_reward = next(x for x in seen if "QA" in x[2] and x[3])
    replay = gym.make(QA).unwrapped
    replay.reset(options={"index": 0})
    _, graded, terminated, _, _ = replay.step({"message": qa_completion[-1]["content"]})
    replay.close()
    assert terminated and qa_reward == graded

    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "no weight changed"


def test_import_ors_gym_imports_no_trainer() -> None:
    import subprocess
    import sys

    code = ("import sys, ors_gym; heavy = [m for m in ('trl', 'skyrl_gym', 'torch', "
            "'transformers', 'datasets') if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_rollout_classes_pickle_and_equal_arguments_share_one() -> None:
    import pickle

    one = OrsSpec(QA, num_tasks=1, api_key="first").environment_factory
    assert pickle.loads(pickle.dumps(one)) is one  # TRL compares env classes by identity
    assert OrsSpec(QA, num_tasks=1, api_key="first").environment_factory is one
    other = OrsSpec(QA, num_tasks=1, api_key="second").environment_factory
    assert other is not one and other.__name__ == one.__name__  # secrets never shared
    assert "first" not in repr(one) and "first" not in repr(one.__dict__.get("__doc__"))


def test_reward_part_columns_after_a_rollout_func_read_the_trajectories() -> None:
    from ors_gym.tokens import Trajectory
    from ors_gym.trl import RewardPart

    def episode(stop: str, parts: dict[str, float]) -> Trajectory:
        return Trajectory(rows=[], messages=[], tools=[], stop_reason=stop, reward_parts=parts)

    ran = [episode("completed", {"format": 0.5}), episode("completed", {}),
           episode("env_error", {"format": 1.0})]
    column = RewardPart("format")
    assert column(completions=[[]] * 3, ors_trajectory=ran) == [0.5, 0.0, None]
