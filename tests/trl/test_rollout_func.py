"""TRL: ``OrsSpec.rollout_func`` under a real ``GRPOTrainer``, token episodes from ``TokenEnv``.

The tokenizer and model come from ``tests/_tiny_lm.py`` (a BPE trained on local text
with TRL's Qwen3 template, a two-layer Qwen3 with random weights), warmed up here on
two QA tasks with three scripts each: the right answer, a wrong one, and a ``hint``
call then the right answer (QA's terminal tool grades the plain replies), until the
model writes each script with a fair chance (checked). So some rollouts are multi-turn
and rewards vary within a group. One two-step trainer run checks
what the trainer trained on against what the episodes sampled, the rewards against
a fresh environment's own grading, the logprobs against the model, and the weights.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

from ors_gym.trl import OrsSpec, ors_reward

if importlib.util.find_spec("trl") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs the trl extra: pip install 'ors-gym[trl]'", allow_module_level=True)

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

from openreward.environments import Environment as _Environment  # noqa: E402
from openreward.environments import TextBlock as _TextBlock  # noqa: E402
from openreward.environments import ToolOutput as _ToolOutput  # noqa: E402
from openreward.environments import tool as _tool  # noqa: E402

COUNTER, QA = "ors/Counter-v0", "ors/QA-v0"
ANSWERS = {0: "Paris", 1: "Tokyo"}  # QA train tasks 0 and 1
#: The chance the warmed model writes each script at least (a third each at best). Of
#: 16 episodes sampled so, none calls hint (a second turn) with a chance under 0.8 ** 16
#: (3 %), about 0.72 ** 16 (0.5 %) at the usual 0.25 to 0.3; none graded 0 likewise, none
#: graded 1 under 0.6 ** 16. Sampling is seeded, so a given machine passes every time.
WARM_UNTIL = 0.2


def test_dataset_prompts_name_their_task() -> None:
    spec = OrsSpec([COUNTER, QA], indices=[0, 2])
    rows = spec.train_dataset
    named = [(p[-1]["ors_env_id"], p[-1]["ors_task_index"]) for p in rows["prompt"]]
    assert named == [(COUNTER, 0), (COUNTER, 2), (QA, 0), (QA, 2)]
    assert all(p[-1]["content"] == "" for p in rows["prompt"])  # environment_factory fills it
    assert rows["environment"] == [e for e, _ in named]


def test_rollout_func_explains_prompts_it_cannot_place() -> None:
    spec = OrsSpec(COUNTER, indices=[0])
    with pytest.raises(ValueError, match=r"does not name its task.*OrsSpec\.train_dataset"):
        spec.rollout_func([[{"role": "user", "content": "hi"}]], None)
    other = [[{"role": "user", "content": "", "ors_env_id": QA, "ors_task_index": 0}]]
    with pytest.raises(ValueError, match="'ors/QA-v0', which is not an id of this OrsSpec"):
        spec.rollout_func(other, None)


def test_ors_reward_scores_a_rollout_func_run_from_its_returns() -> None:
    assert ors_reward(completions=[[], []], ors_return=[1.0, 0.0]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="2 values for 1 completions"):
        ors_reward(completions=[[]], ors_return=[1.0, 0.0])
    assert ors_reward(completions=[[]]) == [None]  # neither: AsyncGRPOTrainer's call


def test_the_vllm_path_asks_for_one_sample_per_episode_within_its_budget() -> None:
    """vLLM cannot run here (no GPU): a stand-in with ``VLLMGeneration.generate``'s signature
    and return shape checks the glue: one sample per prompt, the turn's budget as
    ``max_completion_length`` (restored after), the sampled id's logprob (the first of each
    position's top-k), ids cut at each episode's own budget."""
    from trl.generation.vllm_generation import VLLMGeneration

    from ors_gym.trl._sample import sample

    calls: list[dict[str, Any]] = []

    class Generation:
        max_completion_length = 512

        def generate(self, prompts: list[list[int]], images: Any, num_generations: int,
                     profiler: Any = None) -> tuple[Any, ...]:
            calls.append({"prompts": prompts, "images": images, "n": num_generations,
                          "max": self.max_completion_length})
            ids = [[7, 8, 9, 2] for _ in prompts]
            top = [[[-0.5, -9.0], [-0.25], [None], [-1.0]] for _ in prompts]
            return prompts, ids, top, None

    import inspect

    # the stand-in takes what TRL's own generate takes, in the same order
    assert list(inspect.signature(VLLMGeneration.generate).parameters) == list(
        inspect.signature(Generation.generate).parameters)

    class Trainer:
        use_vllm = True
        vllm_generation = Generation()

    got = sample(Trainer(), [[1, 2], [3]], [3, 10])
    assert calls == [{"prompts": [[1, 2], [3]], "images": None, "n": 1, "max": 10}]
    assert Trainer.vllm_generation.max_completion_length == 512
    assert got == [([7, 8, 9], [-0.5, -0.25, None]), ([7, 8, 9, 2], [-0.5, -0.25, None, -1.0])]


# -- one call's episodes at once, over HTTP and in-process --------------------------------------


class Meeting(_Environment):  # type: ignore[misc]
    """Setup and ``meet`` wait at the test's barriers (when set): they return only if all
    the call's episodes run them at once. Counts its live sessions (creation to teardown)."""

    live = 0
    barriers: list[threading.Barrier] = []

    def __init__(self, task_spec: Any = None, secrets: Any = None) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self._alive = True
        Meeting.live += 1

    async def setup(self) -> None:
        await _wait_at(0)

    async def teardown(self) -> None:
        if self._alive:
            self._alive = False
            Meeting.live -= 1

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, int]]:
        return [{"id": 0}, {"id": 1}]

    async def get_prompt(self) -> list[_TextBlock]:
        return [_TextBlock(text="Call meet.")]

    @_tool
    async def meet(self) -> _ToolOutput:
        """Wait for the others, then end the episode with reward 1."""
        await _wait_at(1)
        return _ToolOutput(blocks=[_TextBlock(text="met")], reward=1.0, finished=True)


async def _wait_at(which: int) -> None:
    if Meeting.barriers:
        await asyncio.to_thread(Meeting.barriers[which].wait)


@pytest.mark.parametrize("where", ["http", "local"])
def test_one_calls_episodes_overlap_and_give_their_sessions_back(where: str) -> None:
    """A stand-in for the trainer's vLLM (its ``generate``'s signature, as checked above)
    answers every prompt with a ``meet`` call; the episodes' setups and calls meet at
    barriers of the group's size (a barrier left alone breaks, and its episode fails)."""
    from types import SimpleNamespace

    from _tiny_lm import encode, tiny_tokenizer, tool_call_text

    from ors_gym.registration import register_class
    from ors_gym.serving import ServerThread

    tok = tiny_tokenizer()
    meet = [*encode(tok, tool_call_text("meet", {})), tok.eos_token_id]

    class Generation:
        max_completion_length = 64

        def generate(self, prompts: list[list[int]], images: Any, num_generations: int,
                     profiler: Any = None) -> tuple[Any, ...]:
            return prompts, [meet for _ in prompts], [[[-0.5]] * len(meet) for _ in prompts], None

    trainer = SimpleNamespace(
        use_vllm=True, vllm_generation=Generation(), processing_class=tok,
        accelerator=SimpleNamespace(num_processes=1),
        args=SimpleNamespace(max_completion_length=64, chat_template_kwargs=None))
    env_id = register_class(Meeting, "ors/Meeting-v0")
    group = 4
    with ServerThread([Meeting]) as server:
        spec = OrsSpec(env_id, **({"base_url": server.url} if where == "http" else {}))
        prompts = [row for row in spec.train_dataset["prompt"] for _ in range(group // 2)]
        before = Meeting.live
        Meeting.barriers = [threading.Barrier(group, timeout=20.0) for _ in range(2)]
        try:
            out = spec.rollout_func(prompts, trainer)
        finally:
            broken = [b.broken for b in Meeting.barriers]
            Meeting.barriers = []
        assert broken == [False, False]  # every setup, then every call, ran at once
        assert out["ors_return"] == [1.0] * group
        assert [t.stop_reason for t in out["ors_trajectory"]] == ["env_ended"] * group
        assert Meeting.live == before  # no session open once the call has returned
        spec.rollout_func.close()  # type: ignore[attr-defined]


def test_a_first_prompt_over_the_models_length_ends_that_episode_only(
        caplog: pytest.LogCaptureFixture) -> None:
    """Counter's first prompt is longer than QA's: with vLLM's max model length between
    them, the Counter episode ends with context_overflow (never sampled, env_mask 0, no
    return) and the QA episode of the same call is sampled and graded."""
    from types import SimpleNamespace

    from _tiny_lm import encode, tiny_tokenizer

    from ors_gym.tokens import TokenEnv

    tok = tiny_tokenizer()
    lengths = []
    for env_id in (COUNTER, QA):
        env = TokenEnv(gym.make(env_id), tok)
        lengths.append(len(env.reset(options={"index": 0})[0]))
        env.close()
    assert lengths[1] < lengths[0]
    paris = [*encode(tok, ANSWERS[0]), tok.eos_token_id]
    asked: list[list[int]] = []

    class Generation:
        max_completion_length = 64

        def generate(self, prompts: list[list[int]], images: Any, num_generations: int,
                     profiler: Any = None) -> tuple[Any, ...]:
            asked.extend(prompts)
            return prompts, [paris for _ in prompts], [[[-0.5]] * len(paris)
                                                       for _ in prompts], None

    trainer = SimpleNamespace(
        use_vllm=True, vllm_generation=Generation(), processing_class=tok,
        accelerator=SimpleNamespace(num_processes=1),
        args=SimpleNamespace(max_completion_length=64, chat_template_kwargs=None,
                             vllm_max_model_length=sum(lengths) // 2))
    spec = OrsSpec([COUNTER, QA])
    prompts = [[{"role": "user", "content": "", "ors_env_id": e, "ors_task_index": 0}]
               for e in (COUNTER, QA)]
    try:
        with caplog.at_level("WARNING", logger="ors_gym"):
            out = spec.rollout_func(prompts, trainer)
    finally:
        spec.rollout_func.close()  # type: ignore[attr-defined]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"not shorter than {sum(lengths) // 2} (vllm_max_model_length)" in warning
    assert [t.stop_reason for t in out["ors_trajectory"]] == ["context_overflow", "completed"]
    assert out["ors_return"] == [None, 1.0]
    assert out["completion_ids"][0] == [] and out["env_mask"][1][: len(paris)] == [1] * len(paris)
    assert [len(p) for p in asked] == [lengths[1]]  # only QA's prompt reached the sampler


def test_no_later_turn_asks_past_the_models_length() -> None:
    """Counter's first prompt leaves room for the reply, not for the tool's result after
    it: the first turn asks for what the prompt leaves, and the episode ends after it with
    context_overflow (ungraded), its second prompt never sent to the sampler."""
    from types import SimpleNamespace

    from _tiny_lm import encode, tiny_tokenizer, tool_call_text

    from ors_gym.tokens import TokenEnv

    tok = tiny_tokenizer()
    env = TokenEnv(gym.make(COUNTER), tok)
    first = len(env.reset(options={"index": 0})[0])
    env.close()
    call = [*encode(tok, tool_call_text("increment", {"amount": 1})), tok.eos_token_id]
    longest = first + len(call) + 2
    asked: list[tuple[int, int]] = []  # (prompt length, the completion length asked for)

    class Generation:
        max_completion_length = 64

        def generate(self, prompts: list[list[int]], images: Any, num_generations: int,
                     profiler: Any = None) -> tuple[Any, ...]:
            asked.extend((len(p), self.max_completion_length) for p in prompts)
            return prompts, [call for _ in prompts], [[[-0.5]] * len(call)
                                                      for _ in prompts], None

    trainer = SimpleNamespace(
        use_vllm=True, vllm_generation=Generation(), processing_class=tok,
        accelerator=SimpleNamespace(num_processes=1),
        args=SimpleNamespace(max_completion_length=64, chat_template_kwargs=None,
                             vllm_max_model_length=longest))
    spec = OrsSpec(COUNTER, indices=[0])
    prompts = [[{"role": "user", "content": "", "ors_env_id": COUNTER, "ors_task_index": 0}]]
    try:
        out = spec.rollout_func(prompts, trainer)
    finally:
        spec.rollout_func.close()  # type: ignore[attr-defined]
    (trajectory,) = out["ors_trajectory"]
    assert asked == [(first, longest - first)]  # not the whole max_completion_length
    assert trajectory.turns == 1 and trajectory.stop_reason == "context_overflow"
    assert len(trajectory.rows[-1].ids) >= longest  # the next prompt fills the model
    assert out["ors_return"] == [None] and set(out["env_mask"][0]) == {0}


def test_with_vllm_over_two_processes_each_turn_sends_every_episode_until_none_runs_anywhere(
) -> None:
    """vLLM gathers every process's prompts and hands back equal shares, so each process
    sends as many prompts as it has episodes at every turn until no process has one
    running. Here QA ends after turn 1 and Counter after turn 2, and the other process
    (its flags given by the stand-in accelerator's ``gather``) runs three turns: turn 2
    pads Counter's prompt with a filler, and one filler-only turn follows."""
    from types import SimpleNamespace

    import torch
    from _tiny_lm import encode, tiny_tokenizer, tool_call_text

    tok = tiny_tokenizer()
    end = [tok.eos_token_id]
    paris = [*encode(tok, ANSWERS[0]), *end]
    increment = [*encode(tok, tool_call_text("increment", {"amount": 1})), *end]
    done = [*encode(tok, tool_call_text("done", {})), *end]
    filler = [tok.pad_token_id]
    calls: list[tuple[list[list[int]], int]] = []
    counter_turns = iter([increment, done])

    class Generation:
        max_completion_length = 64

        def generate(self, prompts: list[list[int]], images: Any, num_generations: int,
                     profiler: Any = None) -> tuple[Any, ...]:
            calls.append((prompts, self.max_completion_length))
            out = [end if p == filler else paris if "France" in tok.decode(p)
                   else next(counter_turns) for p in prompts]
            return prompts, out, [[[-0.5]] * len(ids) for ids in out], None

    other = iter([1, 1, 1, 0])  # the other process: running at its first three gathers
    sent: list[int] = []

    def gather(flag: Any) -> Any:
        sent.append(int(flag.item()))
        return torch.tensor([int(flag.item()), next(other)])

    trainer = SimpleNamespace(
        use_vllm=True, vllm_generation=Generation(), processing_class=tok,
        accelerator=SimpleNamespace(num_processes=2, device="cpu", gather=gather),
        args=SimpleNamespace(max_completion_length=64, chat_template_kwargs=None))
    spec = OrsSpec([QA, COUNTER])
    prompts = [[{"role": "user", "content": "", "ors_env_id": e, "ors_task_index": 0}]
               for e in (QA, COUNTER)]
    try:
        out = spec.rollout_func(prompts, trainer)
    finally:
        spec.rollout_func.close()  # type: ignore[attr-defined]
    assert [t.stop_reason for t in out["ors_trajectory"]] == ["completed", "env_ended"]
    assert sent == [1, 1, 0, 0]  # running at turns 1 and 2; then until the other is done
    assert [len(p) for p, _ in calls] == [2, 2, 2]  # as many prompts as episodes, each turn
    assert calls[1][0][1] == filler and calls[2][0] == [filler, filler]
    assert calls[2][1] == 1  # a filler-only turn asks for one id


# -- a real GRPOTrainer run ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def warmed() -> Iterator[dict[str, Any]]:
    """The shared tiny tokenizer and a model warmed up on QA's three scripts; torch on
    one thread while the module runs (two spin against each other on a busy machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield _warm()
    finally:
        torch.set_num_threads(threads)


def _warm() -> dict[str, Any]:
    from _tiny_lm import tiny_model, tiny_tokenizer, tool_call_text

    from benchmarks._tiny_lm import rows_probability, warm_up
    from ors_gym.tokens import TokenEnv

    tokenizer = tiny_tokenizer()
    env = TokenEnv(gym.make(QA), tokenizer)
    rows, names = [], []
    for index, answer in ANSWERS.items():
        for script in ([answer], ["London"], [tool_call_text("hint", {}), answer]):
            env.reset(options={"index": index})
            for text in script:
                ids = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
                env.step(ids)
            t = env.trajectory
            rows.append((t.prompt_ids, t.completion_ids, t.mask))
            names.append(f"task {index}: {' then '.join(map(repr, script))}")
    env.close()
    model = tiny_model(tokenizer, seed=0)
    # Until each script is likely (a third each at best), not for a fixed count of steps:
    # how many steps that takes depends on the processor's rounding.
    losses = warm_up(model, rows, pad=tokenizer.pad_token_id, steps=300, lr=5e-3,
                     until=WARM_UNTIL)
    model.eval()
    chances = rows_probability(model, rows)
    # (less a rounding margin: the warm-up measured the rows padded in one batch)
    unlikely = [f"{n} {p:.3f}" for n, p in zip(names, chances, strict=True)
                if p < WARM_UNTIL - 1e-3]
    assert not unlikely, (
        f"after {len(losses)} warm-up steps (last losses {[round(x, 3) for x in losses[-3:]]})"
        f" the model writes these scripts with a chance under {WARM_UNTIL}: {unlikely}; the"
        " GRPO run would likely see no second turn or no varied reward")
    return {"model": model, "tokenizer": tokenizer}


def _sampled_turns(completion: list[int], mask: list[int]) -> list[list[int]]:
    """The runs of sampled ids (mask 1), in order: the turns as the model wrote them."""
    turns: list[list[int]] = []
    previous = 0
    for token, m in zip(completion, mask, strict=True):
        if m and not previous:
            turns.append([])
        if m:
            turns[-1].append(token)
        previous = m
    return turns


@pytest.mark.slow
@pytest.mark.timeout(600)  # a shared machine may be slow; it takes far less alone
def test_grpo_trains_on_the_token_episodes_rollout_func_sampled(
    warmed: dict[str, Any], tmp_path: Any,
) -> None:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from ors_gym.tokens import TokenEnv

    model, tokenizer = warmed["model"], warmed["tokenizer"]
    spec = OrsSpec(QA, indices=list(ANSWERS))
    rollouts: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = spec.rollout_func(prompts, trainer)
        # What the model gives the sampled ids now, before this batch's optimiser step.
        logps = []
        with torch.no_grad():
            for p, c in zip(out["prompt_ids"], out["completion_ids"], strict=True):
                logits = trainer.model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:-1]
                logps.append(torch.log_softmax(logits.float(), -1)
                             .gather(-1, torch.tensor(c)[:, None]).squeeze(-1).tolist())
        rollouts.append({"prompts": prompts, "out": out, "model_logps": logps})
        return out

    class Recording(GRPOTrainer):  # type: ignore[misc]
        def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any,
                         **kwargs: Any) -> Any:
            batches.append({k: v.detach().clone() if torch.is_tensor(v) else v
                            for k, v in inputs.items()})
            return super().compute_loss(model, inputs, *args, **kwargs)

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # A small learning rate: the second batch samples from a model still close to the
    # warmed one (a step at 1e-2 made it write noise: no hint, every reward 0).
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=8, num_generations=4,
        max_completion_length=96, learning_rate=1e-3, logging_steps=1, report_to="none",
        use_cpu=True, seed=0, save_strategy="no", temperature=1.0, top_p=1.0,
        gradient_checkpointing=False, disable_tqdm=True, bf16=False,
    )
    trainer = Recording(model=model, processing_class=tokenizer, args=args,
                        train_dataset=spec.train_dataset, rollout_func=rollout_func,
                        reward_funcs=spec.reward_funcs)
    trainer.train()

    assert len(rollouts) == 2 and len(batches) == 2
    replay = TokenEnv(gym.make(QA), tokenizer, max_tokens=96)
    multi_turn = 0
    returns: set[float] = set()
    for call, batch in zip(rollouts, batches, strict=True):
        out = call["out"]
        # One episode per prompt TRL handed over (each row num_generations times), in order.
        tasks = [p[-1]["ors_task_index"] for p in call["prompts"]]
        assert len(tasks) == 8 and sorted(set(tasks)) == list(ANSWERS)
        assert all(len(set(tasks[g:g + 4])) == 1 for g in (0, 4))  # a group is one task
        # The trainer trained on exactly these ids, masks and logprobs (rows matched by ids).
        got = batch["completion_mask"].bool()
        pairs = [(p, c) for p, c in zip(out["prompt_ids"], out["completion_ids"], strict=True)]
        for i in range(8):
            ids = batch["completion_ids"][i][got[i]].tolist()
            prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist()
            j = pairs.index((prompt, ids))
            assert batch["tool_mask"][i][got[i]].tolist() == out["env_mask"][j]
            assert batch["sampling_per_token_logps"][i][got[i]].tolist() == pytest.approx(
                out["logprobs"][j])
        for k, task in enumerate(tasks):
            trajectory = out["ors_trajectory"][k]
            # TRL trains on the last row with sampled ids (one row unless history was rewritten)
            last = max(r for r, row in enumerate(trajectory.rows) if row.completion_ids)
            fields = trajectory.to_trl(last)
            assert {key: fields[key] for key in out if key in fields} == {
                key: out[key][k] for key in ("prompt_ids", "completion_ids", "logprobs",
                                             "env_mask")}
            mask = out["env_mask"][k]
            # Logprobs: the sampled ids' log-probabilities under the model that sampled them.
            sampled = [a for a, m in zip(out["logprobs"][k], mask, strict=True) if m]
            model_side = [a for a, m in zip(call["model_logps"][k], mask, strict=True) if m]
            assert sampled == pytest.approx(model_side, abs=2e-4)
            assert all(a == 0.0 for a, m in zip(out["logprobs"][k], mask, strict=True) if not m)
            # A fresh episode fed the same sampled turns rebuilds the same rows and grade.
            turns = [t for r in trajectory.rows for t in _sampled_turns(r.completion_ids, r.mask)]
            multi_turn += len(turns) > 1
            replay.reset(options={"index": task})
            for turn in turns:
                replay.step(turn)
            assert [r.ids for r in replay.trajectory.rows] == [r.ids for r in trajectory.rows]
            assert [r.mask for r in replay.trajectory.rows] == [r.mask for r in trajectory.rows]
            assert replay.trajectory.reward == out["ors_return"][k] == trajectory.reward
            returns.add(out["ors_return"][k])
    replay.close()
    assert multi_turn, "no episode had a second turn: the env's tokens between turns went untested"
    assert returns == {0.0, 1.0}, "rewards never varied: nothing could learn"

    # The logged rewards are the episodes' returns.
    logged = [h["rewards/ors_reward/mean"] for h in trainer.state.log_history
              if "rewards/ors_reward/mean" in h]
    assert logged == pytest.approx([sum(c["out"]["ors_return"]) / 8 for c in rollouts])
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "no weight changed"
