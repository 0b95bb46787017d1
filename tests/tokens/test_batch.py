"""``TokenBatch``: N token episodes at once over one backend per environment.

Overlap is asserted by events, never by time: the environment's ``setup`` and
its ``meet`` tool each wait at a ``threading.Barrier`` of the batch's size, so
they return only if every episode's call is running at once (run one after
another, the first would wait alone until the barrier's bound breaks it, and
its episode would end with ``env_error``). Sessions are counted on the server,
by the environment's own instances (each lives from its session's creation to
its ``teardown``). Over a real HTTP server and in-process.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    pytest.skip("needs transformers and trl (the tiny tokenizer's template)",
                allow_module_level=True)

from _tiny_lm import encode, tool_call_text

from ors_gym.registration import register_class
from ors_gym.serving import ServerThread, quiet_sdk_logging
from ors_gym.tokens import AsyncTokenBatch, EpisodeRow, TokenBatch, stops

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402 - after the SDK's environment is set
    Environment,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
    tool,
)

N = 4
BOUND_S = 20.0  # a barrier left waiting this long is broken: what failed to overlap fails


class Rendezvous(Environment):
    """Setup and ``meet`` wait at the test's barriers (when set); counts live sessions.
    A task with ``fail`` fails its setup."""

    live = 0
    setup_barrier: threading.Barrier | None = None
    tool_barrier: threading.Barrier | None = None
    _lock = threading.Lock()

    def __init__(self, task_spec: JSONObject | None = None,
                 secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self._counted = True
        with Rendezvous._lock:
            Rendezvous.live += 1

    async def setup(self) -> None:
        if self.task_spec.get("fail"):
            raise RuntimeError("the sandbox could not start")
        await _meet(Rendezvous.setup_barrier)

    async def teardown(self) -> None:
        with Rendezvous._lock:
            if self._counted:
                self._counted = False
                Rendezvous.live -= 1

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": i} for i in range(N)] + [{"id": N, "fail": True}]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Call meet (task {self.task_spec.get('id')}).")]

    @tool
    async def meet(self) -> ToolOutput:
        """Wait for the others, then end the episode with reward 1."""
        await _meet(Rendezvous.tool_barrier)
        return ToolOutput(blocks=[TextBlock(text="met")], reward=1.0, finished=True)

    @tool
    async def stay(self) -> ToolOutput:
        """Go on without ending the episode."""
        return ToolOutput(blocks=[TextBlock(text="stayed")], reward=0.0, finished=False)


async def _meet(barrier: threading.Barrier | None) -> None:
    if barrier is not None:
        await asyncio.to_thread(barrier.wait)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with ServerThread([Rendezvous]) as srv:
        yield srv.url


@pytest.fixture(params=["http", "local"])
def where(request: pytest.FixtureRequest, http_url: str) -> Iterator[dict[str, Any]]:
    """The env id and ``make`` arguments reaching Rendezvous over HTTP or in-process; the
    barriers cleared after."""
    env_id = register_class(Rendezvous, "ors/Rendezvous-v0")
    yield {"env_id": env_id, "env_kwargs": {"base_url": http_url} if request.param == "http"
           else {}}
    Rendezvous.setup_barrier = Rendezvous.tool_barrier = None


def calling(tok: Any, name: str) -> list[int]:
    return [*encode(tok, tool_call_text(name, {})), tok.eos_token_id]


def rows(where: dict[str, Any], indices: Sequence[int]) -> list[EpisodeRow]:
    return [EpisodeRow(where["env_id"], where["env_kwargs"], {"index": i}) for i in indices]


def test_setups_and_tool_calls_overlap_and_sessions_end_with_their_episodes(
    tok: Any, where: dict[str, Any],
) -> None:
    Rendezvous.setup_barrier = threading.Barrier(N, timeout=BOUND_S)
    Rendezvous.tool_barrier = threading.Barrier(N, timeout=BOUND_S)
    before = Rendezvous.live
    with TokenBatch(tok) as batch:
        prompts, infos = batch.reset(rows(where, range(N)))
        assert [i["index"] for i in infos] == list(range(N))  # in the rows' order
        assert all(f"(task {k})" in tok.decode(p) for k, p in enumerate(prompts))
        assert Rendezvous.live - before == N and batch.running == list(range(N))
        obs, rewards, terms, truncs, _ = batch.step([calling(tok, "meet")] * N)
        assert rewards == [1.0] * N and terms == [True] * N and truncs == [False] * N
        assert [t.stop_reason for t in batch.trajectories] == [stops.ENV_ENDED] * N
        assert all(o == t.ids for o, t in zip(obs, batch.trajectories, strict=True))
        assert Rendezvous.live == before  # each ended episode gave its session back at once
        assert batch.pool.made == 1  # one backend for the environment, every episode
        assert not Rendezvous.setup_barrier.broken and not Rendezvous.tool_barrier.broken
        # a second batch on the same backends: no new backend
        Rendezvous.setup_barrier = None
        batch.reset(rows(where, [0]))
        assert batch.pool.made == 1 and Rendezvous.live == before + 1
    assert Rendezvous.live == before  # close() ended the open one


def test_a_failure_stays_with_its_episode(tok: Any, where: dict[str, Any]) -> None:
    before = Rendezvous.live
    with TokenBatch(tok) as batch:
        _, infos = batch.reset(rows(where, [0, N, 1]))  # task N's setup fails
        assert batch.running == [0, 2]
        failed = batch.trajectories[1]
        assert failed.stop_reason == stops.ENV_ERROR and failed.failed
        assert "could not start" in infos[1]["error"]
        assert failed.to_trl()["completion_ids"] == [] and failed.prompt_ids
        assert Rendezvous.live - before == 2  # the failed one holds no session
        with pytest.raises(RuntimeError, match="episode 1 has ended"):
            batch.step([calling(tok, "stay")] * 3)
        # one goes on, one ends, the failed one is not stepped: its entry repeats its ids
        obs, rewards, terms, _, step_infos = batch.step(
            [calling(tok, "stay"), None, calling(tok, "meet")])
        assert rewards == [0.0, 0.0, 1.0] and terms == [False, False, True]
        assert obs[1] == failed.ids and step_infos[1] == {}
        assert batch.running == [0] and Rendezvous.live - before == 1
        batch.end(stops.MAX_TOKENS)
        assert batch.trajectories[0].stop_reason == stops.MAX_TOKENS
        assert Rendezvous.live == before
        with pytest.raises(ValueError, match="one action per episode"):
            batch.step([None])


def test_bad_input_is_refused_before_anything_opens(tok: Any, where: dict[str, Any]) -> None:
    before = Rendezvous.live
    with TokenBatch(tok) as batch:
        with pytest.raises(ValueError, match="unknown environment id 'ors/Nowhere-v0'"):
            batch.reset([*rows(where, [0]), EpisodeRow("ors/Nowhere-v0")])
        with pytest.raises(ValueError, match="needs its env_id"):
            batch.reset([{"index": 0}])
        batch.reset(rows(where, [0]))
        with pytest.raises(ValueError, match="token id"):
            batch.step([[10**9]])
        assert batch.running == [0]
    assert Rendezvous.live == before


def test_the_async_batch_shares_the_pool_it_is_given(tok: Any, where: dict[str, Any]) -> None:
    from ors_gym.tokens import shared_pool

    Rendezvous.tool_barrier = threading.Barrier(2, timeout=BOUND_S)

    async def one(k: int) -> float:
        batch = AsyncTokenBatch(tok, pool=shared_pool())
        try:
            await batch.reset(rows(where, [k]))
            _, rewards, *_ = await batch.step([calling(tok, "meet")])
            return rewards[0]
        finally:
            await batch.close()

    async def run() -> tuple[list[float], int]:
        got = await asyncio.gather(one(0), one(1))  # two batches, one step each, at once
        backends = shared_pool()
        made = backends.made
        await backends.aclose()
        return list(got), made

    assert asyncio.run(run()) == ([1.0, 1.0], 1)


class Brittle:
    """A bridge (the tokenizer's template) that raises for one task's prompt and another's
    next turn: a bridge or template failing inside one episode of the batch."""

    def __init__(self, tok: Any, *, at_prompt: str, at_extend: str) -> None:
        from ors_gym.tokens import TemplateBridge

        self.inner, self.tok = TemplateBridge(tok), tok
        self.at_prompt, self.at_extend = at_prompt, at_extend
        self.name, self.multimodal, self.family = "brittle", False, self.inner.family
        self.stops = self.inner.stops

    def prompt(self, messages: Any, tools: Any) -> list[int]:
        if any(self.at_prompt in str(m.get("content")) for m in messages):
            raise KeyError("the template has no such field")
        return self.inner.prompt(messages, tools)

    def extend(self, previous: Any, completion: Any, new_messages: Any, tools: Any,
               turn: Any = None) -> list[int] | None:
        if self.at_extend in self.tok.decode(previous):
            raise RuntimeError("the bridge broke")
        return self.inner.extend(previous, completion, new_messages, tools, turn)

    def close(self, completion: list[int]) -> list[int]:
        return self.inner.close(completion)

    def parse(self, prompt: list[int], completion: list[int], tools: Any) -> Any:
        return self.inner.parse(prompt, completion, tools)


def test_an_exception_in_one_episode_ends_that_episode_only(
    tok: Any, where: dict[str, Any], caplog: pytest.LogCaptureFixture,
) -> None:
    """A bridge raising in one episode's reset and in another's step: each of those ends
    with env_error naming the exception, gives its session back at once, is logged once at
    WARNING with its traceback; the third episode goes on to its reward."""
    before = Rendezvous.live
    bridge = Brittle(tok, at_prompt="(task 2)", at_extend="(task 1)")
    with TokenBatch(tok, renderer=bridge) as batch:
        with caplog.at_level("WARNING", logger="ors_gym"):
            _, infos = batch.reset(rows(where, [0, 1, 2]))
            assert batch.running == [0, 1] and Rendezvous.live - before == 2
            assert batch.trajectories[2].stop_reason == stops.ENV_ERROR
            assert infos[2]["error"] == "KeyError: 'the template has no such field'"
            stay = calling(tok, "stay")
            obs, rewards, terms, truncs, step_infos = batch.step([stay, stay, None])
        failed = batch.trajectories[1]
        assert failed.stop_reason == stops.ENV_ERROR and failed.failed
        assert step_infos[1]["error"] == "RuntimeError: the bridge broke"
        assert truncs[1] and not terms[1] and rewards[1] == 0.0
        assert failed.completion_ids == stay and failed.rewards == [0.0]  # the turn once
        assert obs[1] == failed.ids and len(failed.messages) == 2
        assert batch.running == [0] and Rendezvous.live - before == 1
        warned = [r for r in caplog.records if r.levelname == "WARNING"]
        assert [r.exc_info[1] for r in warned if r.exc_info] == [
            r.exc_info[1] for r in warned]  # each with its traceback
        assert sorted(type(r.exc_info[1]).__name__ for r in warned if r.exc_info) == [
            "KeyError", "RuntimeError"]
        _, rewards, terms, *_ = batch.step([calling(tok, "meet"), None, None])
        assert rewards[0] == 1.0 and terms[0] and batch.running == []
    assert Rendezvous.live == before


def test_the_shared_pool_closes_when_its_loop_ends(tok: Any, where: dict[str, Any]) -> None:
    """An episode left open on the loop's shared backends is deleted when asyncio.run ends
    the loop (its async generators finalized), and the backends are emptied."""
    from ors_gym.tokens import shared_pool

    before = Rendezvous.live

    async def run() -> Any:
        backends = shared_pool()
        batch = AsyncTokenBatch(tok, pool=backends)
        await batch.reset(rows(where, [0]))  # never ended nor closed
        assert Rendezvous.live - before == 1 and backends.made == 1
        return backends

    backends = asyncio.run(run())
    assert Rendezvous.live == before and repr(backends) == "EnvPool([])"
