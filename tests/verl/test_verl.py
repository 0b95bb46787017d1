"""veRL: the ``ors`` agent loop run by veRL's own ``AgentLoopWorker``, on CPU.

The worker is veRL's (its config composed from veRL's own ``ppo_trainer.yaml``,
its model config read from a tiny Qwen3 saved here, its hydra instantiation of
the registered loop, its padding and its batching into a ``DataProto``), and so
is the data path (``ors_gym.verl.rows`` as parquet, read by veRL's
``RLHFDataset``, collated by its ``collate_fn``). Only
the LLM server is a stand-in: veRL's servers are vLLM/SGLang on GPUs, so a
tiny local model answers ``generate`` with veRL's ``TokenOutput`` (scripted
completions, with the model's own logprobs of them, or sampled ones).

Needs verl, which cannot share the suite's venv: ``bash scripts/verl-venv.sh --test``
builds its venv once and runs this file there; elsewhere it skips.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

# A module of verl itself: with tests/ on the path, "verl" alone finds this folder.
pytest.importorskip(
    "verl.experimental.agent_loop",
    reason="verl has a venv of its own: bash scripts/verl-venv.sh --test",
)
pytest.importorskip("trl")  # tests/_tiny_lm.py takes TRL's Qwen3 chat template

import itertools

import gymnasium as gym
import torch
from _tiny_lm import answer_text, encode, non_canonical, tiny_model, tiny_tokenizer, tool_call_text
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker
from verl.protocol import DataProto
from verl.workers.rollout.replica import TokenOutput

import ors_gym
from ors_gym.tokens import TokenEnv
from ors_gym.verl import OrsAgentLoop, agent_loop_output, num_turns, rows

COUNTER, QA = "ors/Counter-v0", "ors/QA-v0"
PROMPT_LEN, RESPONSE_LEN = 384, 256
AGENT = "actor_rollout_ref.rollout.agent"


class TinyServer:
    """Stands in for veRL's server manager: ``generate`` answers as veRL's does, with a
    ``TokenOutput`` of sampled ids and their logprobs, from a tiny local model. Each
    episode (request id) plays its script of completions, then samples."""

    def __init__(self, model: Any, tokenizer: Any, scripts: dict[str, list[list[int]]]) -> None:
        self.model, self.tokenizer, self.scripts = model, tokenizer, scripts
        self.sessions: dict[str, list[list[int]]] = {}
        self.calls: list[dict[str, Any]] = []

    def _logprobs(self, prompt: list[int], ids: list[int]) -> list[float]:
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt + ids])).logits[0]
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), dim=-1)
        return logp[torch.arange(len(ids)), torch.tensor(ids)].tolist()

    async def generate(self, request_id: str, *, prompt_ids: list[int],
                       sampling_params: dict[str, Any], **_: Any) -> TokenOutput:
        if request_id not in self.sessions:
            self.sessions[request_id] = self._script_for(self.tokenizer.decode(prompt_ids))
        script = self.sessions[request_id]
        if script:
            ids = script.pop(0)[: sampling_params["max_tokens"]]
        else:
            with torch.no_grad():
                out = self.model.generate(
                    torch.tensor([prompt_ids]), do_sample=True, top_k=0,
                    temperature=float(sampling_params["temperature"]) or 1.0,
                    max_new_tokens=min(24, sampling_params["max_tokens"]),
                )
            ids = out[0, len(prompt_ids):].tolist()
        logprobs = self._logprobs(list(prompt_ids), ids)
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids),
                           "ids": ids, "logprobs": logprobs, "params": dict(sampling_params)})
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")

    def _script_for(self, prompt: str) -> list[list[int]]:
        """The script whose key is in the episode's first prompt (none: sample)."""
        return next((list(s) for key, s in self.scripts.items() if key in prompt), [])


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tok: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model and tokenizer saved as veRL's ``model.path`` reads them."""
    path = tmp_path_factory.mktemp("tiny-qwen3")
    tiny_model(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model(model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir).eval()


def verl_config(model_dir: Path, *overrides: str, prompt_length: int = PROMPT_LEN) -> Any:
    """veRL's own trainer config (its ``ppo_trainer.yaml``), pointed at the tiny model."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model_dir}",
            f"actor_rollout_ref.rollout.prompt_length={prompt_length}",
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
            "actor_rollout_ref.rollout.name=vllm",  # which server; none is started here
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "actor_rollout_ref.rollout.agent.default_agent_loop=ors",
            *overrides,
        ])


def batch_of(dataset_rows: list[dict[str, Any]], config: Any, tok: Any,
             folder: Path) -> DataProto:
    """The rows as veRL's trainer hands them to the worker: saved as parquet, read by its
    ``RLHFDataset``, collated by its ``collate_fn`` into a ``DataProto``."""
    import pandas as pd
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    path = folder / "rows.parquet"
    pd.DataFrame(dataset_rows).to_parquet(path)
    data = RLHFDataset(str(path), tok, config.data)
    batch = DataProto.from_single_dict(collate_fn([data[i] for i in range(len(data))]))
    batch.meta_info["global_steps"] = 1
    return batch


def sampled(tok: Any, text: str) -> list[int]:
    return [*encode(tok, text), tok.eos_token_id]


def counter_script(tok: Any) -> list[list[int]]:
    """Counter task 0 (0 -> 6): two increments of 3 (the first non-canonical), then done."""
    return [
        non_canonical(tok, sampled(tok, tool_call_text("increment", {"amount": 3},
                                                       think="I add three."))),
        sampled(tok, tool_call_text("increment", {"amount": 3})),
        sampled(tok, tool_call_text("done", {}, think="It is 6.")),
    ]


@pytest.fixture(scope="module")
def worker_run(model_dir: Path, model: Any, tok: Any,
               server_url: str) -> tuple[DataProto, TinyServer, list[Any]]:
    """One batch through veRL's ``AgentLoopWorker.generate_sequences``: Counter task 0
    (scripted to success), QA task 0 (a hint, then the right answer), QA task 1 (sampled
    by the random model until the env or the token budget ends it), and Counter task 0
    again on a real ORS server over HTTP (the row's ``env_kwargs``)."""
    dataset_rows = [rows(COUNTER, num_tasks=1)[0], *rows(QA, num_tasks=2),
                    rows(COUNTER, num_tasks=1, base_url=server_url)[0]]
    scripts = {
        "The counter is at 0.": counter_script(tok),
        "capital of France": [
            sampled(tok, tool_call_text("hint", {})), sampled(tok, answer_text("Paris")),
        ],
    }
    server = TinyServer(model, tok, scripts)
    config = verl_config(model_dir)
    worker = AgentLoopWorker(config, llm_client=server)
    torch.manual_seed(0)

    async def run() -> DataProto:
        from ors_gym.tokens import shared_pool

        done = await worker.generate_sequences(batch_of(dataset_rows, config, tok, model_dir))
        backends = shared_pool()  # the worker loop's: every sample opened over these
        server.backends_made = backends.made  # type: ignore[attr-defined]
        await backends.aclose()
        return done

    out = asyncio.run(run())
    return out, server, dataset_rows


def test_the_loop_is_registered_under_ors() -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    assert _agent_loop_registry["ors"] == {"_target_": "ors_gym.verl.agent_loop.OrsAgentLoop"}
    assert OrsAgentLoop.__module__ == "ors_gym.verl.agent_loop"


def test_rows_name_each_task_for_verls_dataset() -> None:
    got = rows(QA, num_tasks=2, max_steps=3)
    assert [r["extra_info"]["index"] for r in got] == [0, 1]
    assert got[1] == {
        "prompt": [{"role": "user", "content": ""}],
        "data_source": QA,
        "agent_name": "ors",
        "extra_info": {"env_id": QA, "split": "train", "index": 1,
                       "env_kwargs": {"max_steps": 3}},
    }


def test_verls_worker_batches_the_episodes(worker_run: Any, tok: Any) -> None:
    out, server, _ = worker_run
    batch = out.batch
    assert batch["prompts"].shape == (4, PROMPT_LEN)
    assert batch["responses"].shape == batch["response_mask"].shape == (4, RESPONSE_LEN)
    assert batch["input_ids"].shape == (4, PROMPT_LEN + RESPONSE_LEN)
    assert batch["rollout_log_probs"].shape == (4, RESPONSE_LEN)
    # the env's grade is the reward, on the last response token (veRL's rm_scores)
    rewards = batch["rm_scores"].sum(dim=1).tolist()
    assert rewards[0] == rewards[1] == rewards[3] == 1.0
    last = batch["attention_mask"][:, PROMPT_LEN:].sum(dim=1) - 1
    assert batch["rm_scores"][0, last[0]] == 1.0
    turns = list(out.non_tensor_batch["__num_turns__"])
    assert turns[:2] == [6, 4] and turns[3] == 6
    # the same task in-process and over HTTP: the same tokens
    assert batch["input_ids"][0].tolist() == batch["input_ids"][3].tolist()
    assert {"stop_reason", "turn_scores", "tool_rewards"} <= set(out.non_tensor_batch)
    assert out.non_tensor_batch["stop_reason"][0] == out.non_tensor_batch["stop_reason"][3]
    assert out.non_tensor_batch["stop_reason"][0] == "env_ended"  # Counter's done tool
    assert out.non_tensor_batch["finish_reason"][0] == "completed"  # veRL's word for it
    for metrics in out.meta_info["metrics"]:  # the loop's timings; no preemption reported
        assert metrics["generate_sequences"] > 0 and metrics["num_preempted"] == -1
    # one backend per environment (Counter and QA in-process, Counter over HTTP) for the
    # worker's four samples: a sample opens no backend of its own
    assert server.backends_made == 3
    # one sticky request id per episode, every turn asked for what the budget leaves
    episodes = {c["request_id"] for c in server.calls}
    assert len(episodes) == 4
    for call in server.calls:
        assert 1 <= call["params"]["max_tokens"] <= RESPONSE_LEN
        assert call["params"]["logprobs"] is True


def test_sampled_ids_and_logprobs_reach_the_batch_verbatim(worker_run: Any, tok: Any) -> None:
    out, server, _ = worker_run
    batch = out.batch
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for call in server.calls:
        by_episode.setdefault(call["request_id"], []).append(call)
    for episode in by_episode.values():
        # the sample is the episode's last token row: the calls from the one whose prompt
        # starts it (the first call, unless the chat template rewrote the history)
        (i, j) = next(
            (i, j) for j, call in enumerate(episode) for i in range(4)
            if batch["attention_mask"][i, :PROMPT_LEN].sum() == len(call["prompt_ids"])
            and batch["prompts"][i][PROMPT_LEN - len(call["prompt_ids"]):].tolist()
            == call["prompt_ids"]
        )
        assert out.non_tensor_batch["rows"][i] == 1 or j > 0
        calls = episode[j:]
        n = int(batch["attention_mask"][i, PROMPT_LEN:].sum())
        response = batch["responses"][i, :n].tolist()
        mask = batch["response_mask"][i, :n].tolist()
        logprobs = batch["rollout_log_probs"][i, :n].tolist()
        # the mask-1 tokens are exactly the sampled ids, turn after turn, in order
        assert [t for t, m in zip(response, mask, strict=True) if m] == [
            t for c in calls for t in c["ids"]
        ][: sum(mask)]
        sampled_lp = [lp for lp, m in zip(logprobs, mask, strict=True) if m]
        want_lp = [lp for c in calls for lp in c["logprobs"]][: sum(mask)]
        assert sampled_lp == pytest.approx(want_lp, abs=1e-5)
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
        # each later turn was generated from the whole sequence so far
        for before, after in itertools.pairwise(calls):
            assert after["prompt_ids"][: len(before["prompt_ids"])] == before["prompt_ids"]
            start = len(before["prompt_ids"])
            assert after["prompt_ids"][start : start + len(before["ids"])] == before["ids"]
        # padding past the response is masked out
        assert batch["response_mask"][i, n:].sum() == 0


def test_the_output_matches_a_token_env_run_and_verls_type(tok: Any) -> None:
    """``agent_loop_output`` of a TokenEnv episode is veRL's pydantic type with the
    trajectory's own ids, mask, logprobs and reward; veRL's ``as_dict`` takes it."""
    env = TokenEnv(gym.make(COUNTER), tok)
    env.reset(seed=0, options={"index": 0})
    for k, ids in enumerate(counter_script(tok)):
        env.step({"ids": ids, "logprobs": [-0.5 - k] * len(ids)})
    traj = env.trajectory
    out = agent_loop_output(traj, metrics={"generate_sequences": 0.25})
    assert isinstance(out, AgentLoopOutput)
    assert out.prompt_ids == traj.prompt_ids and out.response_ids == traj.completion_ids
    assert out.response_mask == traj.mask and out.response_logprobs == traj.logprobs
    assert out.reward_score == traj.reward == 1.0
    assert out.num_turns == 1 + 3 + 2  # the task, three assistant turns, two tool replies
    assert out.metrics.generate_sequences == 0.25
    tensors = out.as_dict()
    assert tensors["responses"].tolist() == traj.completion_ids
    assert tensors["rm_scores"][-1] == 1.0
    short = agent_loop_output(traj, response_length=10)
    assert short.response_ids == traj.completion_ids[:10] and len(short.response_mask) == 10
    env.close()


def test_num_turns_counts_as_verls_tool_loop_does() -> None:
    chat = [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "tool"},
            {"role": "tool"}, {"role": "assistant"}, {"role": "assistant"}]
    assert num_turns(chat) == 5


def test_a_prompt_over_prompt_length_ends_its_sample_only(
    model_dir: Path, model: Any, tok: Any,
) -> None:
    """Counter's first prompt is longer than QA's: with a prompt_length between them,
    the Counter sample ends with context_overflow (never sampled, masked, reward 0, its
    prompt cut to veRL's width) while the QA sample in the same batch runs to its grade."""
    counter = TokenEnv(gym.make(COUNTER), tok)
    qa = TokenEnv(gym.make(QA), tok)
    try:
        long = len(counter.reset(options={"index": 0})[0])
        short = len(qa.reset(options={"index": 0})[0])
    finally:
        counter.close()
        qa.close()
    assert short < long
    width = (short + long) // 2
    server = TinyServer(model, tok, {"capital of France": [sampled(tok, answer_text("Paris"))]})
    config = verl_config(model_dir, prompt_length=width)
    worker = AgentLoopWorker(config, llm_client=server)
    dataset_rows = [rows(COUNTER, num_tasks=1)[0], rows(QA, num_tasks=1)[0]]

    async def run() -> DataProto:
        from ors_gym.tokens import shared_pool

        try:
            return await worker.generate_sequences(batch_of(dataset_rows, config, tok,
                                                            model_dir))
        finally:
            await shared_pool().aclose()

    out = asyncio.run(run())
    batch = out.batch
    assert batch["prompts"].shape == (2, width)
    assert list(out.non_tensor_batch["stop_reason"]) == ["context_overflow", "completed"]
    assert list(out.non_tensor_batch["finish_reason"]) == ["length", "completed"]
    assert batch["response_mask"][0].sum() == 0 and batch["response_mask"][1].sum() > 0
    assert batch["rm_scores"].sum(dim=1).tolist() == [0.0, 1.0]
    assert len(server.calls) == 1  # the overflowing sample was never sampled


def test_a_row_without_env_id_is_refused_with_the_fix(model_dir: Path, model: Any,
                                                      tok: Any) -> None:
    """Also the docs' set-up: the loop found through an agent-loop config file (as veRL's
    Ray workers find it), instantiated by veRL; the row's error comes from its ``run``."""
    loops = model_dir / "ors_agent_loops.yaml"
    loops.write_text("- name: ors\n  _target_: ors_gym.verl.OrsAgentLoop\n")
    config = verl_config(model_dir, f"{AGENT}.agent_loop_config_path={loops}")
    worker = AgentLoopWorker(config, llm_client=TinyServer(model, tok, {}))
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    assert _agent_loop_registry["ors"]["_target_"] == "ors_gym.verl.OrsAgentLoop"  # the file's
    bad = rows(QA, num_tasks=1)
    del bad[0]["extra_info"]["env_id"]
    with pytest.raises(ValueError, match=r"env_id .*ors_gym.verl.rows"):
        asyncio.run(worker.generate_sequences(batch_of(bad, config, tok, model_dir)))


def test_ors_gym_itself_does_not_import_verl() -> None:
    import subprocess
    import sys

    code = "import sys, ors_gym; print('verl' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    assert ors_gym is not None


def test_a_vision_models_row_goes_to_verl_with_exactly_its_images() -> None:
    """A Qwen3.5 episode over GridWorld with a ``Qwen3VLProcessor`` (the tiny family
    tokenizer, the image processor built here): ``agent_loop_output`` carries the row's
    frames as ``multi_modal_data["images"]``, one per placeholder run (not the final frame
    the model never read), and veRL's worker turns them into the processor's inputs."""
    import transformers
    from _families import completion, family_tokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker as Worker

    class Processor(transformers.Qwen3VLProcessor):  # no video processor (torchvision)
        def check_argument_for_proper_class(self, name: str, argument: Any) -> Any:
            if argument is None and name == "video_processor":
                return None
            return super().check_argument_for_proper_class(name, argument)

    vl = family_tokenizer("qwen3.5")
    images = getattr(transformers, "Qwen2VLImageProcessorPil", None) or \
        transformers.Qwen2VLImageProcessor
    proc = Processor(image_processor=images(min_pixels=28 * 28, max_pixels=112 * 112),
                     tokenizer=vl, video_processor=None, chat_template=vl.chat_template)
    env = TokenEnv(gym.make("ors/GridWorld-v0"), vl, processor=proc)
    env.reset(options={"task_spec": {"size": 2, "start": [0, 0], "goal": [1, 1],
                                     "cell_px": 28}})
    for direction in ("right", "down"):
        text = completion("qwen3.5", (("move", {"direction": direction}),), think="Go.")
        env.step(encode(vl, text))
    traj = env.trajectory
    out = agent_loop_output(traj)
    assert len(traj.images) == 3 and out.multi_modal_data["images"] == traj.rows[0].images
    assert len(out.multi_modal_data["images"]) == 2  # the goal's frame was never read
    worker = type("W", (), {"processor": proc, "tokenizer": vl,
                            "_get_mm_processor_kwargs": lambda self, audios: None})()
    ids = torch.tensor([out.prompt_ids + out.response_ids])
    inputs = Worker._compute_multi_modal_inputs(worker, out, ids)
    grids = inputs["image_grid_thw"]
    pad = vl.convert_tokens_to_ids("<|image_pad|>")
    assert len(grids) == 2 and int(grids.prod(-1).sum()) // 4 == ids[0].tolist().count(pad)
    # a first prompt over prompt_length: cut, masked, and without its images or their runs
    env.reset(options={"task_spec": {"size": 2, "start": [0, 0], "goal": [1, 1],
                                     "cell_px": 28}})
    from ors_gym.tokens import stops

    env.trajectory.stop_reason = stops.CONTEXT_OVERFLOW
    over = agent_loop_output(env.trajectory, prompt_length=40)
    assert len(over.prompt_ids) == 40 and pad not in over.prompt_ids
    assert not over.multi_modal_data and set(over.response_mask) <= {0}
