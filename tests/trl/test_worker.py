"""``OrsRolloutWorker``: TRL's rollout-worker protocol over free-running ORS token episodes.

The policy is the suite's token stand-in (``tests/_token_server.py``: vLLM's
``/v1/completions`` over HTTP, scripted replies over the tiny tokenizer with TRL's
Qwen3 template, deterministic logprobs); the environment is ``Relay`` below, served
over HTTP by the SDK under uvicorn: ``go`` is fast, or slow until a test opens a gate,
``answer`` ends the episode with reward 1 for "yes". The tests check the samples TRL
receives token for token against what the stand-in answered, that one episode
samples while another's tool still runs, that stale groups are dropped, that no
session is left open, and run TRL's own sample-to-batch code on the samples.
"""

from __future__ import annotations

import asyncio
import importlib.util
import queue
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

if importlib.util.find_spec("trl") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs the trl extra: pip install 'ors-gym[trl]'", allow_module_level=True)

from ors_gym.serving import ServerThread, quiet_sdk_logging

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402
    Environment,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
    tool,
)
from pydantic import BaseModel  # noqa: E402

from ors_gym.registration import register_class  # noqa: E402
from ors_gym.sampling import VllmCompletions  # noqa: E402
from ors_gym.tokens import EpisodeRow  # noqa: E402
from ors_gym.trl.worker import OrsRolloutWorker  # noqa: E402
from tests._tiny_lm import tiny_tokenizer, tool_call_text  # noqa: E402
from tests._token_server import Recorded, TokenServer, token_logprob  # noqa: E402

BOUND_S = 20.0  # how long a gate or an awaited condition may take before the test fails


class Speed(BaseModel):
    speed: str


class Reply(BaseModel):
    text: str


class Relay(Environment):
    """``go(speed)``: "slow" waits for ``SLOW`` (set by the test); ``answer(text)``
    ends the episode, reward 1 for "yes". Counts the sessions alive and the slow
    calls running in this server process."""

    SLOW = threading.Event()
    live = 0
    slow_running = 0
    _lock = threading.Lock()

    def __init__(self, task_spec: JSONObject | None = None,
                 secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self._counted = True
        with Relay._lock:
            Relay.live += 1

    async def teardown(self) -> None:
        with Relay._lock:
            if self._counted:
                self._counted = False
                Relay.live -= 1

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": 0}, {"id": 1}]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Relay task {self.task_spec.get('id')}: go, then answer.")]

    @tool
    async def go(self, params: Speed) -> ToolOutput:
        """Go fast, or slow (until the test lets it return)."""
        if params.speed == "slow":
            with Relay._lock:
                Relay.slow_running += 1
            try:
                await asyncio.to_thread(Relay.SLOW.wait, BOUND_S)
            finally:
                with Relay._lock:
                    Relay.slow_running -= 1
        return ToolOutput(blocks=[TextBlock(text=f"went {params.speed}")], reward=0.0)

    @tool
    async def answer(self, params: Reply) -> ToolOutput:
        """Answer; the episode ends."""
        right = float(params.text == "yes")
        return ToolOutput(blocks=[TextBlock(text="noted")], reward=right, finished=True,
                          metadata={"reward_parts": {"right": right, "brief": 0.5}})


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def relay() -> Iterator[list[EpisodeRow]]:
    env_id = register_class(Relay, "ors/Relay-v0")
    with ServerThread([Relay]) as srv:
        yield [EpisodeRow(env_id, {"base_url": srv.url}, {"index": i}) for i in (0, 1)]


def _end(tok: Any, text: str) -> str:
    return text + tok.eos_token


def _drain(q: queue.Queue[Any], n: int) -> list[Any]:
    return [q.get(timeout=BOUND_S) for _ in range(n)]


def _of_group(q: queue.Queue[Any], group_id: int, n: int) -> list[Any]:
    """The first ``n`` samples of group ``group_id`` (later groups may be scored first)."""
    found: list[Any] = []
    while len(found) < n:
        sample = q.get(timeout=BOUND_S)
        if sample.group_id == group_id:
            found.append(sample)
    return found


def _check_against_server(tok: Any, sample: Any, requests: list[Recorded]) -> int:
    """Every sampled span of ``sample`` is one request's answer, token for token: the ids
    before it are that request's prompt, and each logprob is the stand-in's. Returns the
    turns found."""
    ids = sample.input_ids.tolist()
    mask = sample.completion_mask.tolist()
    lps = sample.old_log_probs.tolist()
    assert len(ids) == len(mask) == len(lps)
    turns, p = 0, 0
    while p < len(ids):
        if not mask[p]:
            assert lps[p] == 0.0
            p += 1
            continue
        end = p
        while end < len(ids) and mask[end]:
            end += 1
        matches = [r for r in requests if r.prompt_ids == ids[:p] and r.ids == ids[p:end]]
        assert matches, f"no request answered the span {p}:{end}"
        expected = np.asarray([token_logprob(t, p + i) for i, t in enumerate(ids[p:end])],
                              dtype=np.float32)
        assert lps[p:end] == expected.tolist()
        turns += 1
        p = end
    return turns


def test_samples_are_exactly_what_was_sampled_and_episodes_run_free(
        tok: Any, relay: list[EpisodeRow]) -> None:
    """Group of two: the first reply calls go(slow), the second go(fast). The fast
    episode's second turn reaches the server while the slow tool still runs; only then is
    the slow tool let go. Lockstep would wait for the slow tool first and fail here."""
    Relay.SLOW.clear()
    seen_running: list[int] = []

    def script(prompt: list[int], text: str) -> str:
        if "went fast" in text:
            seen_running.append(Relay.slow_running)
            Relay.SLOW.set()  # the slow tool may return now, not before
            return _end(tok, tool_call_text("answer", {"text": "yes"}, think="fast"))
        if "went slow" in text:
            return _end(tok, tool_call_text("answer", {"text": "no"}))
        first = sum(1 for r in server.requests if "went" not in
                    tok.decode(r.prompt_ids, skip_special_tokens=False)) == 1
        return _end(tok, tool_call_text("go", {"speed": "slow" if first else "fast"}))

    with TokenServer(tok, script) as server:
        sampler = VllmCompletions(server.base_url, "tiny")
        worker = OrsRolloutWorker(relay[:1], tok, sampler, num_generations=2, max_tokens=256,
                                  max_episodes=2, max_staleness=None)
        worker.start()
        try:
            samples = _of_group(worker.rollout_buffer, 0, 2)
        finally:
            worker.stop()
    # the slow tool was running while the fast episode sampled its second turn
    assert seen_running[0] == 1
    order = [tok.decode(r.prompt_ids, skip_special_tokens=False) for r in server.requests]
    fast_second = next(i for i, t in enumerate(order) if "went fast" in t)
    slow_second = next(i for i, t in enumerate(order) if "went slow" in t)
    assert fast_second < slow_second
    assert all(s.model_version == 0 for s in samples)
    assert sorted(s.advantage for s in samples) == pytest.approx([-1.0, 1.0])
    rewards = {s.metrics["reward"]: s for s in samples}
    assert rewards[1.0].advantage > 0 > rewards[0.0].advantage
    for r, s in rewards.items():  # the environment's named parts ride along
        assert s.metrics["reward_parts/right"] == r and s.metrics["reward_parts/brief"] == 0.5
    for s in samples:
        assert _check_against_server(tok, s, server.requests) == 2
        assert s.prompt[0]["role"] in ("system", "user") and s.completion[0]["role"] == "assistant"
    assert Relay.live == 0  # every session given back


def test_stale_groups_are_dropped_and_counted(tok: Any, relay: list[EpisodeRow]) -> None:
    """max_staleness=0: the first group's turns straddle a version bump and are dropped;
    the groups sampled wholly after it are kept."""
    Relay.SLOW.set()
    bumped = threading.Event()
    holder: dict[str, OrsRolloutWorker] = {}

    def script(prompt: list[int], text: str) -> str:
        if "went" in text:
            if not bumped.is_set():  # the first group's second turn: the trainer steps
                holder["w"].update_model_version(1)
                bumped.set()
            return _end(tok, tool_call_text("answer", {"text": "yes"}))
        return _end(tok, tool_call_text("go", {"speed": "fast"}))

    with TokenServer(tok, script) as server:
        worker = OrsRolloutWorker(relay, tok, VllmCompletions(server.base_url, "tiny"),
                                  num_generations=2, max_tokens=256, max_episodes=2,
                                  max_staleness=0)
        holder["w"] = worker
        worker.start()
        try:
            samples = _drain(worker.rollout_buffer, 4)
        finally:
            worker.stop()
    assert all(s.model_version == 1 for s in samples)
    assert 0 not in {s.group_id for s in samples}
    metrics = []
    while not worker.metrics_queue.empty():
        metrics.append(worker.metrics_queue.get_nowait())
    dropped = sum(m["rollout/dropped_stale_groups_total"] for m in metrics)
    assert dropped >= 1 and metrics[0]["rollout/dropped_stale_groups_total"] == 1.0
    assert all(m["rollout/stop_env_ended_frac"] == (2.0, 2.0) for m in metrics)
    assert all(m["rollout/tool_latency_s"][1] == 4.0 for m in metrics)
    assert Relay.live == 0


def test_stop_mid_episode_gives_every_session_back(tok: Any, relay: list[EpisodeRow]) -> None:
    Relay.SLOW.clear()  # every episode's tool hangs until stop
    with TokenServer(tok, lambda p, t: _end(tok, tool_call_text("go", {"speed": "slow"}))) as s:
        worker = OrsRolloutWorker(relay, tok, VllmCompletions(s.base_url, "tiny"),
                                  num_generations=2, max_episodes=5)
        worker.start()
        for _ in range(int(BOUND_S * 100)):  # until two groups' tools hang
            if Relay.slow_running == 4:
                break
            threading.Event().wait(0.01)
        # the episode bound holds: a third group's two episodes do not fit in the fifth slot
        assert Relay.slow_running == 4 and Relay.live == 4
        worker.check_health(60.0)
        worker.stop()
        worker.stop()
    Relay.SLOW.set()
    assert Relay.live == 0 and worker.rollout_buffer.empty()
    worker.check_health(0.0)  # a stopped worker is not unhealthy


def test_check_health_raises_when_the_loop_dies_or_stalls(tok: Any,
                                                          relay: list[EpisodeRow]) -> None:
    Relay.SLOW.set()
    def script(prompt: list[int], text: str) -> str:
        if "went" in text:
            return _end(tok, tool_call_text("answer", {"text": "yes"}))
        return _end(tok, tool_call_text("go", {"speed": "fast"}))

    with TokenServer(tok, script) as s:
        worker = OrsRolloutWorker(relay, tok, VllmCompletions(s.base_url, "tiny"),
                                  num_generations=2, score_group=True)
        worker.start()
        try:
            with pytest.raises(RuntimeError, match="OrsRolloutWorker failed") as info:
                for _ in range(int(BOUND_S * 100)):
                    worker.check_health(60.0)
                    threading.Event().wait(0.01)
        finally:
            worker.stop()
    assert "does not score groups" in str(info.value.__cause__)
    assert Relay.live == 0  # the other groups, cancelled mid-episode or mid-scoring, too
    stalled = OrsRolloutWorker(relay, tok, VllmCompletions("http://127.0.0.1:9", "tiny"))
    stalled._thread = threading.current_thread()  # alive; never progressed
    stalled._progress -= 100
    with pytest.raises(RuntimeError, match=r"no progress for 10[0-9] s"):
        stalled.check_health(50.0)


def test_trl_batches_the_samples_as_they_were_sampled(tok: Any, relay: list[EpisodeRow]) -> None:
    """TRL's own RolloutQueueDataset, FixedCountBatcher and DataCollatorForRollout
    (packing.TreeRow) on the worker's samples: the loss terms are the sampled ids with
    their logprobs and advantages. (The trainer itself needs a GPU and flash-attention.)"""
    from trl.experimental.async_grpo.async_grpo_trainer import (
        DataCollatorForRollout,
        FixedCountBatcher,
        RolloutQueueDataset,
    )

    Relay.SLOW.set()
    answers = iter(["yes", "no", "no", "yes"])

    def script(prompt: list[int], text: str) -> str:
        if "went" in text:
            return _end(tok, tool_call_text("answer", {"text": next(answers)}))
        return _end(tok, tool_call_text("go", {"speed": "fast"}))

    with TokenServer(tok, script) as server:
        worker = OrsRolloutWorker(relay, tok, VllmCompletions(server.base_url, "tiny"),
                                  num_generations=2, max_tokens=256, max_episodes=2)
        worker.start()
        try:
            samples = _drain(worker.rollout_buffer, 4)
        finally:
            worker.stop()
    fed: queue.Queue[Any] = queue.Queue()
    for s in samples:
        fed.put(s)
    metrics: dict[str, list[Any]] = defaultdict(list)
    dataset = RolloutQueueDataset(fed, model_version_fn=lambda: 2,
                                  check_health_fn=worker.check_health, stale_after_s=60.0,
                                  metrics=metrics, max_staleness=4, poll_interval_s=0.1)
    (rows,) = [next(iter(FixedCountBatcher(dataset, num_processes=1, microbatch_size=4)))]
    batch = DataCollatorForRollout(pad_token_id=tok.pad_token_id).torch_call([rows])
    (row,) = rows
    want_ids, want_lps, want_adv = [], [], []
    for s in row.samples:  # the packer's order
        ids, mask = s["input_ids"].tolist(), s["completion_mask"].tolist()
        for p in range(1, len(ids)):
            if mask[p]:
                want_ids.append(ids[p])
                want_lps.append(float(s["old_log_probs"][p]))
                want_adv.append(s["advantage"])
    index = batch["token_index"][0]
    assert batch["shift_labels"][0][index].tolist() == want_ids
    assert batch["old_log_probs"][0].tolist() == want_lps
    assert batch["advantages"][0].tolist() == pytest.approx(want_adv)
    assert sorted({round(a, 4) for a in want_adv}) == [-1.0, 1.0]
    assert metrics["sample/staleness_max"] == [2.0] * 4
    for s in samples:
        assert _check_against_server(tok, s, server.requests) == 2
    assert Relay.live == 0  # stopped with groups in flight: every session given back


def test_group_scores_are_added_where_the_environment_scores_groups(tok: Any) -> None:
    """``RankedRelay`` scores candidate i of a group as i, added to each return (1 for
    "yes"). ``max_groups=1``: one group, then the worker idles (and is not stalled)."""
    from openreward.environments import GroupCandidate, GroupScore

    class RankedRelay(Relay):
        async def score_group(self, candidates: Sequence[GroupCandidate]
                              ) -> Sequence[GroupScore]:
            return [GroupScore(reward=float(i)) for i, _ in enumerate(candidates)]

    env_id = register_class(RankedRelay, "ors/RankedRelay-v0")
    replies = iter(["yes", "no", "yes"])

    def script(prompt: list[int], text: str) -> str:
        return _end(tok, tool_call_text("answer", {"text": next(replies)}))

    with ServerThread([RankedRelay]) as srv, TokenServer(tok, script) as s:
        rows = [EpisodeRow(env_id, {"base_url": srv.url}, {"index": 0})]
        worker = OrsRolloutWorker(rows, tok, VllmCompletions(s.base_url, "tiny"),
                                  num_generations=3, max_groups=1)
        worker.start()
        try:
            samples = _drain(worker.rollout_buffer, 3)
            for _ in range(int(BOUND_S * 100)):  # until the loop says it has played
                if worker._played:
                    break
                threading.Event().wait(0.01)
            worker._progress -= 1000
            worker.check_health(1.0)  # idle after max_groups: not a stall
        finally:
            worker.stop()
    assert sorted(s.metrics["rewards/ors_group_score"] for s in samples) == [0.0, 1.0, 2.0]
    for s in samples:
        assert s.metrics["reward"] == (s.metrics["rewards/ors_return"]
                                       + s.metrics["rewards/ors_group_score"])
    rewards = sorted(s.metrics["reward"] for s in samples)
    assert sum(s.metrics["rewards/ors_return"] for s in samples) == 2.0
    mean = sum(rewards) / 3
    std = (sum((r - mean) ** 2 for r in rewards) / 3) ** 0.5
    assert sorted(s.advantage for s in samples) == pytest.approx(
        [(r - mean) / (std + 1e-8) for r in rewards])
    assert worker.rollout_buffer.empty() and Relay.live == 0


def test_a_refused_sample_ends_its_episode_ungraded(tok: Any, relay: list[EpisodeRow],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The server refuses the group's first request: that episode ends (env_error, with
    a WARNING naming the endpoint), the other is scored alone (advantage 0)."""
    from tests._token_server import Fail

    Relay.SLOW.set()
    refused: list[int] = []

    def script(prompt: list[int], text: str) -> Any:
        if not refused:
            refused.append(1)
            return Fail(503, "overloaded")
        if "went" in text:
            return _end(tok, tool_call_text("answer", {"text": "yes"}))
        return _end(tok, tool_call_text("go", {"speed": "fast"}))

    with TokenServer(tok, script) as server, caplog.at_level("WARNING", logger="ors_gym"):
        worker = OrsRolloutWorker(relay[:1], tok, VllmCompletions(server.base_url, "tiny"),
                                  num_generations=2, max_groups=1)
        worker.start()
        try:
            (sample,) = _drain(worker.rollout_buffer, 1)
        finally:
            worker.stop()
    report = worker.metrics_queue.get_nowait()
    assert report["rollout/sampler_errors_total"] == 1.0
    assert report["rollout/stop_env_error_frac"] == (1.0, 2.0)
    assert sample.advantage == 0.0 and sample.metrics["reward"] == 1.0
    assert any("answered 503" in r.getMessage() and "/v1/completions" in r.getMessage()
               for r in caplog.records)
    assert worker.rollout_buffer.empty() and Relay.live == 0


def test_a_context_without_room_ends_episodes_ungraded(tok: Any,
                                                      relay: list[EpisodeRow]) -> None:
    """``max_model_len`` leaves room for the first turn only (measured on a first group
    played in full): each episode's second turn cannot be asked for, so the episodes end
    ungraded and the group gives no sample."""
    Relay.SLOW.set()

    def script(prompt: list[int], text: str) -> str:
        if "went" in text:
            return _end(tok, tool_call_text("answer", {"text": "yes"}))
        return _end(tok, tool_call_text("go", {"speed": "fast"}))

    reports = []
    with TokenServer(tok, script) as server:
        for room in (None, 0):
            first = len(server.requests[0].prompt_ids) if server.requests else 0
            limit = None if room is None else first + 32  # the first reply fits, no more
            worker = OrsRolloutWorker(relay[:1], tok, VllmCompletions(server.base_url, "tiny"),
                                      num_generations=2, max_groups=1, max_model_len=limit)
            worker.start()
            try:
                reports.append(worker.metrics_queue.get(timeout=BOUND_S))
            finally:
                worker.stop()
    full, cut = reports
    assert full["rollout/context_full_total"] == 0.0 and full["rollout/turns_mean"][0] == 4.0
    assert cut["rollout/context_full_total"] == 2.0 and cut["rollout/turns_mean"][0] == 2.0
    assert cut["rollout/stop_context_overflow_frac"] == (2.0, 2.0)
    assert all(r.body["max_tokens"] == 32 for r in server.requests[4:])
    assert worker.rollout_buffer.empty() and Relay.live == 0


def test_an_orsspec_gives_its_rows_and_bad_arguments_are_named(
        tok: Any, relay: list[EpisodeRow]) -> None:
    from ors_gym.trl import OrsSpec

    url = relay[0].env_kwargs["base_url"]
    spec = OrsSpec("ors/Relay-v0", base_url=url, token_kwargs={"system": "Be brief."})
    sampler = VllmCompletions("http://127.0.0.1:9", "tiny")
    worker = OrsRolloutWorker(spec, tok, sampler)
    assert worker._rows == [EpisodeRow("ors/Relay-v0", {"base_url": url},
                                       {"index": i, "split": "train"}) for i in (0, 1)]
    assert worker.settings.token_kwargs["system"] == "Be brief."
    assert tok.convert_tokens_to_ids("<|im_end|>") in worker.settings.token_kwargs["renderer"].stops
    with pytest.raises(ValueError, match=r"max_episodes \(4\) must be at least num_generations"):
        OrsRolloutWorker(relay, tok, sampler, num_generations=8, max_episodes=4)
    with pytest.raises(TypeError, match="sampler must be a TokenSampler"):
        OrsRolloutWorker(relay, tok, object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="source has no rows"):
        OrsRolloutWorker([], tok, sampler)
    from _processors import qwen_processor

    with pytest.raises(ValueError, match="RolloutSample carries no images"):
        OrsRolloutWorker(relay, qwen_processor(tok), sampler)


def test_max_tokens_counts_the_sampled_tokens_only(tok: Any, relay: list[EpisodeRow]) -> None:
    """Three turns an episode (go, go, answer). Measured on a first group: each turn's
    sampled ids. ``max_tokens`` their sum: every episode plays its three turns, each
    request asking for what is left of the sampled budget (the environment's ids between
    turns are not charged to it). ``max_tokens`` the first two turns' sum: no third turn
    is asked for, and the episodes end with ``max_tokens``."""
    Relay.SLOW.set()

    def script(prompt: list[int], text: str) -> str:
        if text.count("went fast") >= 2:
            return _end(tok, tool_call_text("answer", {"text": "yes"}))
        return _end(tok, tool_call_text("go", {"speed": "fast"}))

    def turn_of(r: Recorded) -> int:
        return tok.decode(r.prompt_ids, skip_special_tokens=False).count("went fast")

    reports = []
    with TokenServer(tok, script) as server:
        for run in range(3):
            if run == 0:
                budget = 256
            else:
                lengths = {turn_of(r): len(r.ids) for r in server.requests}
                assert sorted(lengths) == [0, 1, 2]
                budget = sum(lengths.values()) if run == 1 else lengths[0] + lengths[1]
            before = len(server.requests)
            worker = OrsRolloutWorker(relay[:1], tok, VllmCompletions(server.base_url, "tiny"),
                                      num_generations=2, max_groups=1, max_tokens=budget)
            worker.start()
            try:
                reports.append(worker.metrics_queue.get(timeout=BOUND_S))
            finally:
                worker.stop()
            asked = sorted((turn_of(r), r.body["max_tokens"]) for r in server.requests[before:])
            left = [budget, budget - lengths[0], budget - lengths[0] - lengths[1]] if run else []
            if run == 1:
                assert asked == [(k, left[k]) for k in (0, 0, 1, 1, 2, 2)]
            if run == 2:
                assert asked == [(k, left[k]) for k in (0, 0, 1, 1)]
    full, exact, short = reports
    assert full["rollout/stop_env_ended_frac"] == exact["rollout/stop_env_ended_frac"] == (2.0, 2.0)
    assert full["rollout/turns_mean"] == exact["rollout/turns_mean"] == (6.0, 2.0)
    assert short["rollout/stop_max_tokens_frac"] == (2.0, 2.0)
    assert short["rollout/turns_mean"] == (4.0, 2.0)
    assert Relay.live == 0


class _SlowClose(VllmCompletions):
    """vLLM's sampler whose ``aclose`` waits for the test: ``closing`` is set when it
    starts, and it goes on when the test sets ``release`` (on the worker's loop)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.closing = threading.Event()
        self.release: asyncio.Event | None = None
        self.closed = False

    async def aclose(self) -> None:
        self.release = asyncio.Event()
        self.closing.set()
        await self.release.wait()
        await super().aclose()
        self.closed = True


def test_stop_right_after_the_loop_died_keeps_the_cause_and_closes_the_sampler(
        tok: Any, relay: list[EpisodeRow], caplog: pytest.LogCaptureFixture) -> None:
    """As TRL's trainer does: the loop dies (``score_group=True`` on an environment that
    does not score groups) and ``stop()`` comes while the sampler is still closing. The
    close finishes, and the first failure stays the cause, in ``check_health`` and the
    log."""
    Relay.SLOW.set()

    def script(prompt: list[int], text: str) -> str:
        if "went" in text:
            return _end(tok, tool_call_text("answer", {"text": "yes"}))
        return _end(tok, tool_call_text("go", {"speed": "fast"}))

    with TokenServer(tok, script) as s, caplog.at_level("ERROR", logger="ors_gym"):
        sampler = _SlowClose(s.base_url, "tiny")
        worker = OrsRolloutWorker(relay[:1], tok, sampler, num_generations=2, score_group=True)
        worker.start()
        assert sampler.closing.wait(BOUND_S)  # the loop died and is closing the sampler
        stopping = threading.Thread(target=worker.stop)
        stopping.start()
        for _ in range(int(BOUND_S * 100)):  # until stop() has asked the loop to end
            if worker._stopping:
                break
            threading.Event().wait(0.01)
        loop, release = worker._loop, sampler.release
        assert loop is not None and release is not None
        loop.call_soon_threadsafe(release.set)  # after stop()'s request, on the same loop
        stopping.join(BOUND_S)
        assert not stopping.is_alive()
    assert sampler.closed
    with pytest.raises(RuntimeError, match="OrsRolloutWorker failed") as info:
        worker.check_health(60.0)
    assert isinstance(info.value.__cause__, ValueError)
    assert "does not score groups" in str(info.value.__cause__)
    died = [r.getMessage() for r in caplog.records if "loop died" in r.getMessage()]
    assert len(died) == 1 and "does not score groups" in died[0], died
    assert "CancelledError" not in died[0]
    assert Relay.live == 0
