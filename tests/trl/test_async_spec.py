"""TRL's own async rollout loop (``AsyncGRPOTrainer``'s) on ``OrsSpec``'s factory and rewards.

``_AsyncRolloutLoop`` is built with the keyword arguments ``AsyncRolloutWorker`` hands
it, sampling from a real HTTP stand-in of vLLM's ``/v1/completions`` that answers
scripted Qwen3 text over the tiny tokenizer (TRL's own chat template and tool-call
parsing). Every rollout's reward is checked against a replay of its tool calls on a
fresh environment; sessions are counted on the server (HTTP) and on each instance's
own backend (in-process). One test spawns TRL's real ``AsyncRolloutWorker`` child.
"""

from __future__ import annotations

import importlib.util
import math
import multiprocessing as mp
import queue
import re
import threading
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

from ors_gym.trl import OrsRollout, OrsSpec

if importlib.util.find_spec("trl") is None or importlib.util.find_spec("aiohttp") is None:
    pytest.skip("needs the trl extra: pip install 'ors-gym[trl]'", allow_module_level=True)

from tests._tiny_lm import answer_text, tiny_tokenizer, tool_call_text
from tests._token_server import TokenServer

COUNTER = "ors/Counter-v0"
TASKS = [12, 17, 18]  # Counter tasks whose target is 1 to 5: one increment can reach it
GROUP = 2


class _Script:
    """Turn 1: ``increment`` by the target (odd calls) or one more (even calls); then "Done."."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, prompt_ids: list[int], text: str) -> str:
        last_user = text.rsplit("<|im_start|>user", 1)[-1]
        if "<tool_response>" in last_user:
            return answer_text("Done.") + "<|im_end|>"
        target = int(re.findall(r"Make it equal (-?\d+)", text)[-1])
        with self.lock:
            self.calls += 1
            amount = target if self.calls % 2 else target + 1
        return tool_call_text("increment", {"amount": amount}) + "<|im_end|>"


def _replay(completion: list[dict[str, Any]], task: int, **env_kwargs: Any) -> float:
    """The episode's return, played again on a fresh environment from the rollout's calls."""
    env = gym.make(COUNTER, **env_kwargs).unwrapped
    try:
        env.reset(options={"index": task})
        total, done = 0.0, False
        for message in completion:
            for call in message.get("tool_calls") or []:
                function = call["function"]
                _, r, done, _, _ = env.step({"tool_calls": [
                    {"name": function["name"], "arguments": function["arguments"]}]})
                total += r
        if not done:
            _, r, _, _, _ = env.step({"message": completion[-1]["content"]})
            total += r
        return total
    finally:
        env.close()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from accelerate.state import PartialState

    PartialState()  # as TRL's trainer and child do first: the loop logs through accelerate
    return tiny_tokenizer()


def _loop_kwargs(spec: OrsSpec, tokenizer: Any, base_url: str) -> dict[str, Any]:
    """What ``AsyncGRPOTrainer`` hands ``AsyncRolloutWorker`` (and it the loop), trimmed."""
    return {
        "model_name": "tiny", "dataset": spec.train_dataset,
        "reward_funcs": [spec.reward_funcs], "processing_class": tokenizer,
        "eos_token_ids": [tokenizer.eos_token_id],
        "environment_factory": spec.environment_factory, "num_generations": GROUP,
        "max_inflight_tasks": 2, "vllm_server_url": base_url, "max_tokens": 48,
        "max_tool_calling_iterations": 3, "queue_maxsize": 0, "dataset_start_index": 0,
    }


def _samples(buffer: Any, n: int) -> list[Any]:
    return [buffer.get(timeout=120) for _ in range(n)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", ["http", "local"])
def test_trls_async_loop_scores_ors_returns_and_holds_no_session(
    where: str, tokenizer: Any, server: Any,
) -> None:
    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

    from ors_gym import _cleanup

    env_kwargs = {"base_url": server.url} if where == "http" else {}
    before = set(server.sdk_server._active_envs)
    spec = OrsSpec(COUNTER, indices=TASKS, **env_kwargs)
    with TokenServer(tokenizer, _Script()) as vllm:
        buffer: queue.Queue[Any] = queue.Queue()
        loop = _AsyncRolloutLoop(
            **_loop_kwargs(spec, tokenizer, vllm.base_url), rollout_buffer=buffer,
            model_version_value=mp.Value("i", 0), heartbeat_value=mp.Value("d", 0.0),
            failed_event=mp.Event(), exception_info_queue=queue.Queue(maxsize=1),
            metrics_queue=queue.Queue(maxsize=4096),
        )
        runner = threading.Thread(target=loop.run, daemon=True)
        runner.start()
        try:
            got = _samples(buffer, 3 * GROUP)  # three groups scored
            # Hold the sampler until both rollout slots wait on it: the two rollouts in
            # flight hold the only sessions (none kept by scored or reused instances).
            vllm.gate.clear()
            _wait_for(lambda: vllm.in_flight == 2)
            if where == "http":
                assert len(set(server.sdk_server._active_envs) - before) == 2
            else:
                assert sum(len(e.env._core.backend.open_sessions)
                           for e in _live_rollouts() if e.env is not None) == 2
            vllm.gate.set()
        finally:
            loop._loop.call_soon_threadsafe(loop._stop_event.set)
            runner.join(timeout=60)
    assert not runner.is_alive() and not loop._failed_event.is_set()

    rewards = []
    for sample in got:
        task = TASKS[sample.group_id % len(TASKS)]
        want = _replay(sample.completion, task, **env_kwargs)
        column = sample.metrics[f"rewards/{spec.environment_factory.__name__}"]
        assert column == want  # the environment's own column: the ORS return
        assert math.isnan(sample.metrics["rewards/ors_reward"])  # not counted twice
        assert sample.metrics["reward"] == want
        # Each rollout started afresh: its first increment counted from the task's start, 0.
        first = next(m for m in sample.completion if m["role"] == "tool")
        amount = sample.completion[0]["tool_calls"][0]["function"]["arguments"]["amount"]
        assert first["content"] == f"The counter is now {amount}."
        rewards.append(want)
    assert set(rewards) == {0.0, 1.0}, rewards
    assert any(s.advantage > 0 for s in got) and any(s.advantage < 0 for s in got)
    # Instances were reused: no more were made than rollout slots (2), for 6 rollouts.
    made = [o for o in _live_rollouts() if type(o) is spec.environment_factory]
    assert len(made) <= 2

    # After stop nothing is held: the pool's instances have no session, and those cut
    # off mid-rollout were dropped, their sessions deleted by their finalisers.
    assert all(e.env.session_id is None for e in loop._environment_pool[None])
    del loop, made
    assert _cleanup.flush()
    if where == "http":
        assert set(server.sdk_server._active_envs) == before
    else:
        live = [o for o in _live_rollouts() if o.env is not None]
        assert all(not o.env._core.backend.open_sessions for o in live)


def _wait_for(condition: Any, timeout: float = 30.0) -> None:
    """Wait until ``condition()`` holds (checked every 10 ms), or fail after ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        pause.wait(0.01)


def _live_rollouts() -> Iterator[OrsRollout]:
    import gc

    gc.collect()
    return (o for o in gc.get_objects() if isinstance(o, OrsRollout))


@pytest.mark.slow  # spawning TRL's child re-imports torch, transformers and TRL: ~25 s
@pytest.mark.timeout(300)
def test_trls_spawned_worker_runs_the_spec_with_ids_registered_in_the_parent(
    tokenizer: Any, server: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real ``AsyncRolloutWorker``: the spec pickled into its spawned child, which knows
    the parent's ``register_server`` id only from the pickled class."""
    from trl.experimental.async_grpo import async_rollout_worker as trl_worker

    from ors_gym import register_server

    # The worker refuses to start without vLLM installed; its child never imports vLLM (it
    # samples over HTTP), so the check alone is lifted here.
    monkeypatch.setattr(trl_worker, "is_vllm_available", lambda: True)
    (env_id,) = [i for i in register_server(server.url, namespace="ors-spawned")
                 if i.endswith("/Counter-v0")]
    before = set(server.sdk_server._active_envs)
    spec = OrsSpec(env_id, indices=TASKS[:1])
    with TokenServer(tokenizer, _Script()) as vllm:
        worker = trl_worker.AsyncRolloutWorker(**_loop_kwargs(spec, tokenizer, vllm.base_url))
        try:
            worker.start()
            got = _samples(worker.rollout_buffer, GROUP)
            worker.check_health(stale_after_s=120)
        finally:
            worker.stop()
    column = f"rewards/{spec.environment_factory.__name__}"
    for sample in got:
        assert sample.metrics[column] == _replay(sample.completion, TASKS[0], base_url=server.url)
    assert sorted(s.metrics[column] for s in got) == [0.0, 1.0]
    assert set(server.sdk_server._active_envs) == before  # the child gave every session back
