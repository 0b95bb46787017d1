"""``AsyncOrsEnv``: the async core, over both backends and at scale on one event loop.

Real servers on 127.0.0.1 and real in-process SDK environments; no mocks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
from openreward.environments import Environment, Split, TextBlock, ToolOutput, tool

from ors_gym import AsyncHttpBackend, AsyncLocalBackend, AsyncOrsEnv, OrsEnv
from ors_gym.backends.http import pooled_transport
from ors_gym.envs.gridworld import GridWorld
from ors_gym.envs.math import Math
from ors_gym.serving import ServerThread

#: Set by ``Blocker.hold`` when a call has started on the environment's side.
STARTED = threading.Event()
#: Calls of ``Blocker.count`` running at once, and the most seen.
ACTIVE = {"now": 0, "max": 0}
#: Instances whose teardown() ran.
TORN_DOWN: list[int] = []


class Blocker(Environment):
    """A tool that holds until cancelled, and one that counts concurrent calls."""

    def __init__(self, task_spec: Any = None, secrets: Any = None) -> None:
        super().__init__(task_spec or {}, secrets or {})

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[dict[str, Any]]:
        return [{"id": i} for i in range(4)]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="hold or count")]

    @tool
    async def hold(self) -> ToolOutput:
        """Signal that the call started, then wait far longer than any test."""
        STARTED.set()
        await asyncio.sleep(30)
        return ToolOutput(blocks=[TextBlock(text="held")], reward=0.0)

    @tool
    async def count(self) -> ToolOutput:
        """Count how many calls of this tool run at once."""
        ACTIVE["now"] += 1
        ACTIVE["max"] = max(ACTIVE["max"], ACTIVE["now"])
        await asyncio.sleep(0.02)
        ACTIVE["now"] -= 1
        return ToolOutput(blocks=[TextBlock(text="counted")], reward=1.0, finished=True)

    async def teardown(self) -> None:
        TORN_DOWN.append(id(self))


#: Held closed by a test: ``SlowStart``'s constructor (so its server's ``/create``) waits on it.
CREATE_GATE = threading.Event()
#: Set by ``SlowStart``'s constructor once it runs (a ``/create`` is in flight).
CREATING = threading.Event()


class SlowStart(Environment):
    """An environment whose constructor, run inside the server's ``/create``, waits for
    the test to open ``CREATE_GATE``."""

    def __init__(self, task_spec: Any = None, secrets: Any = None) -> None:
        super().__init__(task_spec or {}, secrets or {})
        CREATING.set()
        CREATE_GATE.wait(10.0)

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[dict[str, Any]]:
        return [{"id": 0}]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="started")]

    @tool
    async def noop(self) -> ToolOutput:
        """Do nothing."""
        return ToolOutput(blocks=[TextBlock(text="ok")], reward=0.0, finished=True)


HOLD = {"tool_calls": [{"name": "hold", "arguments": {}}]}
COUNT = {"tool_calls": [{"name": "count", "arguments": {}}]}


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    with ServerThread([Math, GridWorld, Blocker]) as server:
        yield server


def live(server: ServerThread) -> set[str]:
    return set(server.sdk_server._active_envs)


async def _episode(env: AsyncOrsEnv, index: int) -> float:
    """One Math episode answered correctly: reset by index, submit the expected answer."""
    _, info = await env.reset(options={"index": index})
    answer = info["task_spec"]["answer"]
    _, reward, terminated, _, _ = await env.step(
        {"tool_calls": [{"name": "submit", "arguments": {"answer": answer}}]}
    )
    assert terminated
    return reward


def test_async_env_matches_orsenv_in_process() -> None:
    """The same seeded GridWorld episode gives the same results through both faces."""
    moves = ["right", "down", "right", "down", "left"]

    def sync_run() -> list[Any]:
        env = OrsEnv(env_class=GridWorld)
        try:
            obs, info = env.reset(seed=3)
            out = [obs["text"], info["task_spec"]]
            for move in moves:
                obs, reward, term, trunc, _ = env.step(
                    {"tool_calls": [{"name": "move", "arguments": {"direction": move}}]}
                )
                out.append((obs["text"], reward, term, trunc))
            return out
        finally:
            env.close()

    async def async_run() -> list[Any]:
        async with AsyncOrsEnv(env_class=GridWorld) as env:
            obs, info = await env.reset(seed=3)
            out = [obs["text"], info["task_spec"]]
            for move in moves:
                obs, reward, term, trunc, _ = await env.step(
                    {"tool_calls": [{"name": "move", "arguments": {"direction": move}}]}
                )
                out.append((obs["text"], reward, term, trunc))
            return out

    assert asyncio.run(async_run()) == sync_run()


def test_async_env_over_http(srv: ServerThread) -> None:
    async def main() -> None:
        async with AsyncOrsEnv(base_url=srv.url, env_name="math") as env:
            tools = await env.discover()
            assert [t.name for t in tools.tools] == ["submit"]
            assert env.env_name == "math" and env.tools_as("openai")[0]["type"] == "function"
            assert await _episode(env, 2) == 1.0
            sid = env.session_id
            assert sid in live(srv)
        assert sid not in live(srv)  # closing the env deleted its session

    asyncio.run(main())


def test_thousand_concurrent_in_process_episodes() -> None:
    """1,000 episodes at once on one loop over one backend; every session deleted after."""

    async def main() -> tuple[list[float], frozenset[str]]:
        backend = AsyncLocalBackend(Math)
        envs = [AsyncOrsEnv(backend=backend) for _ in range(1000)]
        rewards = await asyncio.gather(*(_episode(e, i % 50) for i, e in enumerate(envs)))
        assert len(backend.open_sessions) == 1000
        await asyncio.gather(*(e.close() for e in envs))
        return rewards, backend.open_sessions

    rewards, left = asyncio.run(main())
    assert rewards == [1.0] * 1000
    assert left == frozenset()


@pytest.mark.slow
def test_256_concurrent_http_episodes(srv: ServerThread) -> None:
    """256 episodes at once over one pooled client; the server holds no session after."""
    before = live(srv)

    async def main() -> list[float]:
        client = pooled_transport(None, 260)
        backend = AsyncHttpBackend(srv.url, transport=client)
        try:
            envs = [AsyncOrsEnv(env_name="math", backend=backend) for _ in range(256)]
            rewards = await asyncio.gather(*(_episode(e, i % 50) for i, e in enumerate(envs)))
            assert len(live(srv) - before) == 256
            await asyncio.gather(*(e.close() for e in envs))
            return rewards
        finally:
            await backend.aclose()
            await client.aclose()

    assert asyncio.run(main()) == [1.0] * 256
    assert live(srv) == before


def test_limiter_bounds_requests_in_flight() -> None:
    """A semaphore shared by 24 envs keeps at most 3 tool calls running at once."""
    ACTIVE.update(now=0, max=0)

    async def main() -> list[float]:
        limiter = asyncio.Semaphore(3)
        async with AsyncLocalBackend(Blocker) as backend:
            envs = [AsyncOrsEnv(backend=backend, limiter=limiter) for _ in range(24)]
            await asyncio.gather(*(e.reset() for e in envs))
            steps = await asyncio.gather(*(e.step(COUNT) for e in envs))
            await asyncio.gather(*(e.close() for e in envs))
            return [s[1] for s in steps]

    assert asyncio.run(main()) == [1.0] * 24
    assert ACTIVE["max"] == 3


def test_cancelling_a_step_in_process_leaves_nothing_behind() -> None:
    STARTED.clear()
    TORN_DOWN.clear()

    async def main() -> None:
        backend = AsyncLocalBackend(Blocker)
        env = AsyncOrsEnv(backend=backend)
        await env.reset()
        task = asyncio.create_task(env.step(HOLD))
        while not STARTED.is_set():  # the tool runs on this loop: yield until it starts
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert env.session_id is None
        assert backend.open_sessions == frozenset()
        assert len(TORN_DOWN) == 1  # the session's teardown() ran
        assert asyncio.all_tasks() == {asyncio.current_task()}  # no task left running

    asyncio.run(main())


def test_cancelling_a_step_over_http_deletes_the_session(srv: ServerThread) -> None:
    STARTED.clear()
    before = live(srv)

    async def main() -> None:
        async with AsyncOrsEnv(base_url=srv.url, env_name="blocker") as env:
            await env.reset()
            sid = env.session_id
            assert sid in live(srv)
            task = asyncio.create_task(env.step(HOLD))
            # The tool runs in the server's thread: wait for its signal off this loop.
            assert await asyncio.to_thread(STARTED.wait, 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert env.session_id is None
            assert sid not in live(srv)
            await env.close()
            backend = env.backend
            assert isinstance(backend, AsyncHttpBackend) and not backend.open_sessions
            # Nothing left running once the env (and the backend it made) is closed.
            assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())
    assert live(srv) == before


def test_orsenv_works_inside_a_running_loop(srv: ServerThread) -> None:
    """Jupyter runs cells inside a loop: both faces work there, in-process and over HTTP."""

    async def cell() -> None:
        env = OrsEnv(env_class=Math)  # blocking face, called from inside a running loop
        try:
            _, info = env.reset(options={"index": 1})
            answer = {"tool_calls": [{"name": "submit",
                                      "arguments": {"answer": info["task_spec"]["answer"]}}]}
            assert env.step(answer)[1] == 1.0
        finally:
            env.close()
        async with AsyncOrsEnv(base_url=srv.url, env_name="math") as aenv:
            assert await _episode(aenv, 4) == 1.0

    asyncio.run(cell())


def test_async_env_errors_are_clear() -> None:
    async def main() -> None:
        async with AsyncOrsEnv(env_class=Math) as env:
            with pytest.raises(RuntimeError, match="discover"):
                _ = env.tools
            with pytest.raises(Exception, match="reset"):
                await env.step(COUNT)
        with pytest.raises(RuntimeError, match="closed"):
            await env.reset()

    asyncio.run(main())
    with pytest.raises(TypeError, match="did you mean 'max_steps'"):
        AsyncOrsEnv(env_class=Math, max_step=3)
    with pytest.raises(ValueError, match="needs an environment"):
        AsyncOrsEnv()


def test_cancelling_reset_while_create_is_in_flight_leaves_no_session() -> None:
    """The server opens the session whatever the client does: the cancelled reset waits
    for the creation and deletes what it opened."""
    CREATE_GATE.clear()
    CREATING.clear()
    with ServerThread([SlowStart]) as server:

        async def cancel_mid_create() -> None:
            env = AsyncOrsEnv(base_url=server.url, env_name="slowstart")
            try:
                await env.discover()
                reset = asyncio.create_task(env.reset(seed=0))
                assert await asyncio.to_thread(CREATING.wait, 10.0)  # /create is in flight
                reset.cancel()
                CREATE_GATE.set()  # the server finishes opening the session
                with pytest.raises(asyncio.CancelledError):
                    await reset
                assert env.session_id is None
                await env.backend.probe()  # one more round trip: the server is done with it
                assert live(server) == set()
            finally:
                CREATE_GATE.set()
                await env.close()

        asyncio.run(cancel_mid_create())


class _DeleteHeld(httpx.AsyncBaseTransport):
    """The package's pool, but the first ``/delete`` is held before it is sent (``held``
    is set then) until its task is cancelled; later ones go through."""

    def __init__(self) -> None:
        self.pool = pooled_transport()
        self.held = asyncio.Event()
        self.deletes = self.pings = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.pings += request.url.path.endswith("/ping")
        if request.url.path.endswith("/delete"):
            self.deletes += 1
            if self.deletes == 1:
                self.held.set()
                await asyncio.Event().wait()  # never set: this request is never sent
        return await self.pool.handle_async_request(request)

    async def aclose(self) -> None:
        await self.pool.aclose()


def test_cancelling_the_end_of_an_episode_still_deletes_its_session(srv: ServerThread) -> None:
    """The task giving a session back is cancelled before its ``/delete`` is sent (a
    worker stopped while a group closes its scoring session): the deletion is made
    again, then the cancellation goes on."""

    async def main() -> None:
        door = _DeleteHeld()
        env = AsyncOrsEnv(base_url=srv.url, env_name="math", transport=door)
        try:
            await env.reset(options={"index": 0})
            sid = env.session_id
            assert sid in live(srv)
            ending = asyncio.create_task(env.end_session())
            await door.held.wait()
            ending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await ending
            assert env.session_id is None and door.deletes == 2
            assert sid not in live(srv)
        finally:
            await env.close()
            await door.aclose()

    asyncio.run(main())


def test_a_backend_keeps_a_session_whose_deletion_was_cancelled(srv: ServerThread) -> None:
    """A ``/delete`` cancelled before it was sent: the session stays among the backend's
    open ones, no longer kept alive (a server that did not answer its deletion reaps it
    when idle), and ``aclose`` deletes it."""

    async def main() -> None:
        door = _DeleteHeld()
        backend = AsyncHttpBackend(srv.url, transport=door)
        try:
            sid = await backend.create_session("math", split="train", index=0)
            other = await backend.create_session("math", split="train", index=1)
            deleting = asyncio.create_task(backend.delete_session(sid))
            await door.held.wait()
            deleting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await deleting
            assert backend.open_sessions == {sid, other} and sid in live(srv)
            await backend._ping_open_sessions()  # what the keepalive task does each tick
            assert door.pings == 1  # the other session's: the one being deleted is not kept
            await backend.aclose()
            assert not backend.open_sessions and not {sid, other} & set(live(srv))
        finally:
            await backend.aclose()
            await door.aclose()

    asyncio.run(main())
