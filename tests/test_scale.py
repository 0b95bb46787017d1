"""Many sessions from one process, against several real SDK server processes.

The servers host ``tests._test_envs.Census``, which counts the sessions alive
in its own process; every test ends by reading those counts from the servers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from benchmarks._common import ROOT, child_env
from ors_gym.errors import OrsConnectionError
from benchmarks.bench_scale import ServerProcess, start_servers

CENSUS = "tests._test_envs:Census"
WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}
#: Sessions in the Ctrl-C tests.
N_INTERRUPT = 1000


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


@pytest.fixture(scope="module")
def servers() -> Iterator[list[ServerProcess]]:
    procs = start_servers([CENSUS], 4)
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()


# -- Ctrl-C ------------------------------------------------------------------------------------

_CLIENT = r'''
import asyncio, sys
mode, n, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}
TASK = {"task_spec": {"delay_ms": 60000}}
if mode in ("step", "recv"):
    from ors_gym.vector import OrsVectorEnv
    env = OrsVectorEnv(n, base_url=urls, env_name="census")
    env.reset(options=TASK)
    if mode == "step":
        print("in flight", flush=True)
        env.step((WAIT,) * n)
    else:
        env.send((WAIT,) * n)
        print("in flight", flush=True)
        env.recv(min_envs=n)
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
@pytest.mark.parametrize("mode", ["step", "recv", "async"])
def test_ctrl_c_mid_batch_deletes_every_session(
    servers: list[ServerProcess], mode: str
) -> None:
    """SIGINT while 1,000 calls are running on 4 servers: no session outlives the client."""
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
    assert "KeyboardInterrupt" in err
    assert live(servers) == [0, 0, 0, 0], err[-2000:]


# -- a server restarted mid-run ------------------------------------------------------------------


def test_a_restarted_server_ends_only_its_own_sub_envs() -> None:
    """Kill one of 2 servers mid-run: its sub-envs truncate with ``server_unreachable``
    while the others step on; restarted on the same port, they autoreset onto it."""
    from ors_gym.vector import OrsVectorEnv

    servers = start_servers([CENSUS], 2)
    env = None
    try:
        env = OrsVectorEnv(8, base_url=[s.url for s in servers], env_name="census",
                           backend_options={"max_retries": 1, "backoff": 0.01})
        env.reset(options={"task_spec": {"delay_ms": 1}})
        mine = [i for i in range(8) if i % 2 == 1]  # the sub-envs of the server killed
        others = [i for i in range(8) if i % 2 == 0]
        obs, *_ = env.step((WAIT,) * 8)
        assert set(obs["text"]) == {"waited 1"}

        servers[1].kill()
        for k in (2, 3):  # the step that meets the dead server, then an autoreset attempt
            obs, _, _, truncated, info = env.step((WAIT,) * 8)
            assert [bool(truncated[i]) for i in range(8)] == [i in mine for i in range(8)]
            assert [obs["text"][i] for i in others] == [f"waited {k}"] * 4
            assert all(info["error_reason"][i] == "server_unreachable" for i in mine), info
            assert all(servers[1].url in info["error"][i] for i in mine)

        servers[1].start()  # same port, no sessions
        obs, _, _, truncated, _ = env.step((WAIT,) * 8)  # autoreset onto the restarted server
        assert not truncated.any()
        assert [obs["text"][i] for i in mine] == ["Call wait."] * 4
        assert [obs["text"][i] for i in others] == ["waited 4"] * 4
        obs, *_ = env.step((WAIT,) * 8)
        assert [obs["text"][i] for i in mine] == ["waited 1"] * 4
        assert census(servers[1].url)["live"] == 4

        servers[0].kill()
        servers[1].kill()
        with pytest.raises(OrsConnectionError, match="every ORS server stopped answering"):
            env.step((WAIT,) * 8)
        servers[0].start()
        servers[1].start()
        env.reset()  # everything back
        assert live(servers) == [4, 4]
        env.close()
        assert live(servers) == [0, 0]
    finally:
        if env is not None:
            env.close()
        for s in servers:
            s.stop()
