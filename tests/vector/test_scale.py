"""Many sessions from one process, against more than one real SDK server process.

The servers host ``tests._test_envs.Census``, which counts the sessions alive
in its own process; every test ends by reading those counts from the servers.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from benchmarks._common import ROOT, child_env
from benchmarks.bench_scale import ServerProcess, start_servers
from ors_gym.errors import OrsConnectionError

CENSUS = "tests._test_envs:Census"
WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}
#: Sessions in the Ctrl-C tests: fewer than the benchmark's 1,000, for the suite's time;
#: the script is the same at any count.
N_INTERRUPT = 100


def census(url: str) -> dict[str, int]:
    """The server's own count of live sessions and running ``wait`` calls."""
    response = httpx.post(f"{url}/census/tasks", json={"split": "census"}, timeout=120)
    response.raise_for_status()
    return dict(response.json()["tasks"][0])


def live(servers: list[ServerProcess]) -> list[int]:
    return [census(s.url)["live"] for s in servers]


def wait_until(condition: object, timeout: float, what: str) -> None:
    """Poll ``condition()`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


#: Server processes shared by the tests: more than one, so sessions spread over servers and
#: one can die while another answers; each costs a process importing the SDK.
N_SERVERS = 2


@pytest.fixture(scope="module")
def server_procs() -> Iterator[list[ServerProcess]]:
    procs = start_servers([CENSUS], N_SERVERS)
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()


@pytest.fixture
def servers(server_procs: list[ServerProcess]) -> list[ServerProcess]:
    """The shared servers, every one up: a server a test killed is started again (on its
    port) only when a later test needs it."""
    _restart([s for s in server_procs if s.proc is None])
    return server_procs


# -- Ctrl-C ------------------------------------------------------------------------------------

_CLIENT = r'''
import asyncio, signal, sys
# Ctrl-C raises KeyboardInterrupt even when this process was started with SIGINT ignored (as
# nohup or a background job starts it): Python installs its handler only over the default one.
signal.signal(signal.SIGINT, signal.default_int_handler)
mode, n, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
if mode.endswith("+tmp"):  # a weakref.finalize made before ors_gym is imported
    import tempfile
    keep = tempfile.TemporaryDirectory()
    mode = mode[:-4]
closing = mode.endswith("+close")  # the script closes the env itself on Ctrl-C
mode = mode.removesuffix("+close")
WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}
TASK = {"task_spec": {"delay_ms": 60000}}
if mode in ("step", "recv"):
    from ors_gym.vector import OrsVectorEnv
    env = OrsVectorEnv(n, base_url=urls, env_name="census")
    env.reset(options=TASK)
    try:
        if mode == "step":
            print("in flight", flush=True)
            env.step((WAIT,) * n)
        else:
            env.send((WAIT,) * n)
            print("in flight", flush=True)
            env.recv(min_envs=n)
    finally:
        if closing:
            env.close()
else:
    from ors_gym import AsyncOrsEnv
    from ors_gym.backends.http import AsyncHttpBackend

    async def episode(env):
        await env.reset(options=TASK)
        await env.step(WAIT)

    async def main():
        backends = [AsyncHttpBackend(url) for url in urls]
        envs = [AsyncOrsEnv(backend=backends[i % len(urls)], env_name="census")
                for i in range(n)]
        print("in flight", flush=True)
        await asyncio.gather(*(episode(env) for env in envs))

    asyncio.run(main())
'''


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    ["step", "recv", "step+tmp", "recv+close", "async"],
)
def test_ctrl_c_mid_batch_deletes_every_session(
    servers: list[ServerProcess], mode: str
) -> None:
    """SIGINT while every session's call runs on the servers: no session outlives the client."""
    urls = [s.url for s in servers]
    client = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, mode, str(N_INTERRUPT), *urls],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT,
    )
    try:
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "in flight", client.stderr
        # Every session is open and running its call, as the servers see it.
        wait_until(lambda: sum(census(u)["waiting"] for u in urls) == N_INTERRUPT, 120,
                   f"{N_INTERRUPT} calls running on the servers")
        client.send_signal(signal.SIGINT)
        _, err = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    counts = live(servers)
    if any(counts):  # leaked: restart the servers, so the tests after this one start clean
        for s in servers:
            s.kill()
        _restart(servers)
    assert "KeyboardInterrupt" in err
    assert counts == [0] * N_SERVERS, err[-2000:]


# -- 1,000 sessions and the soak -----------------------------------------------------------------

#: Sessions of the scale tests (the soak runs fewer): bounded for the suite's time on 2 cores;
#: ``python -m benchmarks.bench_scale`` and ``bench_soak --mode vector`` run 1,000.
N_SCALE = 200


@pytest.mark.slow
def test_many_sessions_step_in_one_vector_env(servers: list[ServerProcess]) -> None:
    from ors_gym.vector import OrsVectorEnv

    env = OrsVectorEnv(N_SCALE, base_url=[s.url for s in servers], env_name="census")
    try:
        env.reset(options={"task_spec": {"delay_ms": 50}})
        assert live(servers) == [N_SCALE // N_SERVERS] * N_SERVERS
        for k in (1, 2):
            obs, _, _, truncated, _ = env.step((WAIT,) * N_SCALE)
            assert not truncated.any() and set(obs["text"]) == {f"waited {k}"}
    finally:
        env.close()
    assert live(servers) == [0] * N_SERVERS


@pytest.mark.slow
def test_many_async_episodes_on_one_loop(servers: list[ServerProcess]) -> None:
    import asyncio

    from ors_gym import AsyncOrsEnv
    from ors_gym.backends.http import AsyncHttpBackend, pooled_transport

    async def main() -> list[str]:
        client = pooled_transport(None, N_SCALE + 4)
        backends = [AsyncHttpBackend(s.url, transport=client) for s in servers]
        envs = [AsyncOrsEnv(backend=backends[i % N_SERVERS], env_name="census")
                for i in range(N_SCALE)]

        async def episode(env: AsyncOrsEnv) -> str:
            await env.reset(options={"task_spec": {"delay_ms": 50}})
            await env.step(WAIT)
            obs, _, _, truncated, _ = await env.step(WAIT)
            return "truncated" if truncated else str(obs["text"])

        try:
            return await asyncio.gather(*(episode(e) for e in envs))
        finally:
            await asyncio.gather(*(e.close() for e in envs))
            await asyncio.gather(*(b.aclose() for b in backends))
            await client.aclose()

    assert set(asyncio.run(main())) == {"waited 2"}
    assert live(servers) == [0] * N_SERVERS


@pytest.mark.slow
def test_soak_with_every_20th_stream_cut_loses_no_step(servers: list[ServerProcess]) -> None:
    """Sessions of one OrsVectorEnv through a proxy cutting every 20th tool-call stream
    (each cut call resumed by its task id); short episodes, so autoresets run too."""
    from benchmarks.bench_soak import Tally, vector_soak
    from tests._hostile import FlakyProxy

    tally = Tally()
    with FlakyProxy(servers[0].url, cut_every=20) as proxy:
        vector_soak(proxy.url, 300, 50, {"delay_ms": 2, "length": 4}, tally,
                    env_name="census")
        cuts = proxy.cuts
    assert (tally.lost, tally.errors) == (0, [])
    assert tally.completed >= 300 and cuts >= 12
    assert live(servers) == [0] * N_SERVERS


# -- a server restarted mid-run (last: it leaves the servers killed) -----------------------------


def _restart(servers: list[ServerProcess]) -> None:
    for s in servers:
        s.launch()
    for s in servers:
        s.wait_bound()


@pytest.mark.slow
def test_a_restarted_server_ends_only_its_own_sub_envs(servers: list[ServerProcess]) -> None:
    """Kill one of 2 servers mid-run: its sub-envs truncate with ``server_unreachable``
    while the others step on; restarted on the same port, they autoreset onto it."""
    from ors_gym.vector import OrsVectorEnv

    pair = servers[:2]
    env = OrsVectorEnv(8, base_url=[s.url for s in pair], env_name="census",
                       backend_options={"max_retries": 1, "backoff": 0.01})
    try:
        env.reset(options={"task_spec": {"delay_ms": 1}})
        mine = [i for i in range(8) if i % 2 == 1]  # the sub-envs of the server killed
        others = [i for i in range(8) if i % 2 == 0]
        obs, *_ = env.step((WAIT,) * 8)
        assert set(obs["text"]) == {"waited 1"}

        pair[1].kill()
        for k in (2, 3):  # the step that meets the dead server, then an autoreset attempt
            obs, _, _, truncated, info = env.step((WAIT,) * 8)
            assert [bool(truncated[i]) for i in range(8)] == [i in mine for i in range(8)]
            assert [obs["text"][i] for i in others] == [f"waited {k}"] * 4
            assert all(info["error_reason"][i] == "server_unreachable" for i in mine), info
            assert all(pair[1].url in info["error"][i] for i in mine)

        _restart(pair[1:])  # same port, no sessions
        obs, _, _, truncated, _ = env.step((WAIT,) * 8)  # autoreset onto the restarted server
        assert not truncated.any()
        assert [obs["text"][i] for i in mine] == ["Call wait."] * 4
        assert [obs["text"][i] for i in others] == ["waited 4"] * 4
        obs, *_ = env.step((WAIT,) * 8)
        assert [obs["text"][i] for i in mine] == ["waited 1"] * 4
        assert live(pair) == [4, 4]

        pair[0].kill()
        pair[1].kill()
        with pytest.raises(OrsConnectionError, match="every ORS server stopped answering"):
            env.step((WAIT,) * 8)
    finally:
        env.close()
    # The killed servers took their sessions with them; the `servers` fixture starts them
    # again for any test that runs after this one (last in the file, so none by default).
