"""The measured process of ``bench_vector``: one case at one N, stepped on the parent's command.

Run as a file (``python benchmarks/_vector_child.py CASE N URL DELAY_MS``), so
``ors_gym`` comes from ``PYTHONPATH`` alone: the parent points it at this tree,
or at another commit's tree for the baseline case. Hence only the standard
library, gymnasium and ``ors_gym``'s public API are imported here, never the
``benchmarks`` package (the other tree may not have this file).

Protocol: after setup (built, reset, warmed up) one JSON line ``{"setup": s,
"ors_gym": where it was imported from}``; then per ``run SECONDS`` line on
stdin, one JSON line ``{"env_steps", "seconds", "cpu"}``; ``close`` (or end of
input) ends it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ORS = "OrsVectorEnv"
PIPE = "OrsVectorEnv pipelined"
SYNC = "SyncVectorEnv"
ASYNC = "AsyncVectorEnv"
ONE = "OrsEnv"
FLOOR = "httpx floor"
FLOOR_PIPE = "httpx floor pipelined"
HTTPX = "OrsVectorEnv over httpx transport"
WAIT = {"tool_calls": [{"name": "wait", "arguments": {}}]}
LENGTH = 10_000_000  # calls per episode: no episode ends during a run
LATENCY = "ors_gym.envs.testing.latency:Latency"
#: Sessions per ``httpx.AsyncHTTPTransport`` of the floors (see ``_Floor``).
FLOOR_SESSIONS_PER_POOL = 2
#: The ``url`` of the in-process variant: every env hosts Latency itself (LocalBackend).
IN_PROCESS = "in-process"


def _make(case: str, n: int, url: str) -> Any:
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    from ors_gym.vector import OrsVectorEnv, make_env_fns

    # No step limit: every case steps the same episodes from start to end of the run.
    where: dict[str, Any] = (
        {"env_class": LATENCY} if url == IN_PROCESS else {"base_url": url, "env_name": "latency"}
    )
    if case == HTTPX:
        _pool_is_httpx_own()
    if case in (ORS, HTTPX):
        return OrsVectorEnv(n, max_steps=LENGTH, **where)
    if case == PIPE:
        return OrsVectorEnv(n, max_steps=LENGTH, autoreset_mode=AutoresetMode.NEXT_STEP, **where)
    if case == ONE:
        return _Plain(n, where)
    env_id = "ors/Remote-v0"
    if url == IN_PROCESS:
        from ors_gym.envs.testing import register_test_envs

        register_test_envs()
        env_id = "ors/Latency-v0"
    fns = make_env_fns(env_id, n, max_steps=LENGTH, max_episode_steps=LENGTH, **where)
    if case == SYNC:
        return SyncVectorEnv(fns)
    return AsyncVectorEnv(fns, shared_memory=False)


def _pool_is_httpx_own() -> None:
    """Make the vector env's shared pool httpx's own ``AsyncHTTPTransport`` (same limits),
    to weigh ors_gym's pool against it in one run."""
    import httpx

    import ors_gym.backends.http as http

    def pooled(max_connections: int | None = None,
               max_keepalive_connections: int | None = None, *,
               max_connections_per_host: int | None = None,
               trust_env: bool = True) -> httpx.AsyncBaseTransport:
        # httpx's pool has no per-host bound; with one server, max_connections is it.
        bound = min(filter(None, (max_connections, max_connections_per_host)), default=None)
        limits = httpx.Limits(max_connections=bound,
                              max_keepalive_connections=max_keepalive_connections)
        return httpx.AsyncHTTPTransport(limits=limits, trust_env=trust_env)

    http.pooled_transport = pooled  # type: ignore[assignment]


def _lockstep(env: Any, n: int, seconds: float) -> int:
    """``step()`` every sub-env together for ``seconds`` (at least once); env-steps done."""
    actions = (WAIT,) * n
    steps, t0 = 0, time.perf_counter()
    while steps < 1 or time.perf_counter() - t0 < seconds:
        _, _, _, truncated, info = env.step(actions)
        if truncated.any():
            raise RuntimeError(f"a sub-env failed: {info.get('error')}")
        steps += 1
    return n * steps


def _pipelined(env: Any, n: int, seconds: float) -> int:
    """Every sub-env kept in flight: each id ``recv`` returns is sent again at once.

    After ``seconds`` nothing more is sent and what is in flight is received, so
    each run starts and ends with no call outstanding; env-steps are those
    ``recv`` returned.
    """
    end = time.perf_counter() + seconds
    env.send((WAIT,) * n)
    outstanding, done = n, 0
    while outstanding:
        _, _, _, truncated, info = env.recv(min_envs=1)
        ids = info["env_id"]
        if truncated.any():
            raise RuntimeError(f"a sub-env failed: {info.get('error')}")
        done += len(ids)
        outstanding -= len(ids)
        if time.perf_counter() < end:
            env.send((WAIT,) * len(ids), ids)
            outstanding += len(ids)
    return done


class _Plain:
    """N plain ``OrsEnv`` stepped one after another: at N = 1, what a vector of one is
    measured against (the same server, tool and step)."""

    def __init__(self, n: int, where: dict[str, Any]) -> None:
        from ors_gym import OrsEnv

        self.envs = [OrsEnv(max_steps=LENGTH, **where) for _ in range(n)]

    def reset(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.reset(**kwargs)

    def step(self, actions: Sequence[Any]) -> tuple[Any, ...]:
        truncated, errors = [], []
        for env, action in zip(self.envs, actions, strict=True):
            _, _, _, cut, info = env.step(action)
            truncated.append(cut)
            errors.append(info.get("error"))
        return None, None, None, _Flags(truncated), {"error": errors}

    def close(self) -> None:
        for env in self.envs:
            env.close()


class _Flags(list[bool]):
    def any(self) -> bool:
        return any(self)


class _Floor:
    """httpx's async floor: the exact ``/call`` request of one env-step, for N sessions.

    The pool is httpx's own, as httpx ships it: ``httpx.AsyncHTTPTransport``
    shards, each session pinned to one (two per shard: httpcore's pool examines
    every connection it holds on each request, so small pools are its cheapest
    use, which keeps this a floor). Sessions are opened and deleted with ``AsyncHttpBackend``
    (outside the timed part). The request is the one the backend sends for a
    ``wait()`` call, recorded at setup; each send builds an ``httpx.Request``,
    hands it to the session's transport and reads the body to its end,
    decoding nothing. ``pipelined``: each session's task sends again as soon as
    its answer is in (as ``send``/``recv`` step); else all N are sent together
    and awaited together (as ``step()``).
    """

    def __init__(self, n: int, url: str, delay_ms: float, pipelined: bool) -> None:
        self.n = n
        self.pipelined = pipelined
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._open(url, delay_ms))

    async def _open(self, url: str, delay_ms: float) -> None:
        import httpx

        from ors_gym.backends.http import AsyncHttpBackend, pooled_transport

        self.client = pooled_transport(None, self.n + 4)
        self.backend = AsyncHttpBackend(url, transport=self.client, keepalive_interval=None)
        spec = {"delay_ms": delay_ms, "length": LENGTH}
        self.sids: list[str] = list(await asyncio.gather(*(
            self.backend.create_session("latency", task_spec=spec) for _ in range(self.n)
        )))
        self.method, self.url, headers, self.content, self.extensions = (
            await self._recorded(self.sids[0])
        )
        shards = _shards(self.n)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=self.n + 4)
        self.transports = [httpx.AsyncHTTPTransport(limits=limits) for _ in range(shards)]
        self.sessions = [
            ({**headers, "X-Session-ID": sid}, self.transports[i * shards // self.n])
            for i, sid in enumerate(self.sids)
        ]
        await self._run(0.0)  # warm up: every session's connection opened

    async def _recorded(self, sid: str) -> tuple[str, str, dict[str, str], bytes, dict[str, Any]]:
        """The request ``AsyncHttpBackend.call`` sends for ``wait()``, seen at its transport."""
        transport = self.client
        seen: list[Any] = []
        handle = transport.handle_async_request

        async def spy(request: Any) -> Any:
            await request.aread()  # the body, kept for ``request.content``
            seen.append(request)
            return await handle(request)

        transport.handle_async_request = spy  # type: ignore[method-assign]
        try:
            await self.backend.call("latency", sid, "wait", {})
        finally:
            del transport.handle_async_request
        calls = [r for r in seen if r.url.path.endswith("/call")]
        if len(calls) != 1:
            raise RuntimeError(
                f"the floor expected one /call request through the client's transport, saw "
                f"{[str(r.url) for r in seen]}; update _Floor to how the backend sends now"
            )
        request = calls[0]
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("x-session-id", "host", "content-length")}
        return (request.method, str(request.url), headers, request.content,
                {"timeout": dict(request.extensions["timeout"])})

    async def _call(self, session: tuple[dict[str, str], Any]) -> None:
        """One ``/call``: sent to the session's transport, its body read to the end, checked."""
        import httpx

        headers, transport = session
        response = await transport.handle_async_request(httpx.Request(
            self.method, self.url, headers=headers, content=self.content,
            extensions=self.extensions,
        ))
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        if response.status_code != 200 or b"event: end" not in body:
            raise RuntimeError(f"the floor's /call failed ({response.status_code}): "
                               f"{body[-300:]!r}")

    async def _task(self, session: tuple[dict[str, str], Any], end: float) -> int:
        done = 0
        while done < 1 or time.perf_counter() < end:
            await self._call(session)
            done += 1
        return done

    async def _run(self, seconds: float) -> int:
        end = time.perf_counter() + seconds
        if self.pipelined:
            return sum(await asyncio.gather(*(self._task(s, end) for s in self.sessions)))
        batches = 0
        while batches < 1 or time.perf_counter() < end:
            await asyncio.gather(*(self._call(s) for s in self.sessions))
            batches += 1
        return batches * self.n

    def run(self, seconds: float) -> int:
        return self.loop.run_until_complete(self._run(seconds))

    def close(self) -> None:
        async def close() -> None:
            for transport in self.transports:
                await transport.aclose()
            await asyncio.gather(*(self.backend.delete_session(s) for s in self.sids))
            await self.backend.aclose()
            await self.client.aclose()

        self.loop.run_until_complete(close())
        self.loop.close()


def _shards(n: int) -> int:
    """How many ``httpx.AsyncHTTPTransport`` the floor splits ``n`` sessions over."""
    return -(-n // FLOOR_SESSIONS_PER_POOL)


def child(case: str, n: int, url: str, delay_ms: float) -> None:
    """Build the case, then step it on the parent's command, reporting each run."""
    try:
        from ors_gym.serving import quiet_sdk_logging

        quiet_sdk_logging()
    except ImportError:  # an older tree (a baseline) may not have it
        pass
    import ors_gym

    started = time.perf_counter()
    env: Any
    if case in (FLOOR, FLOOR_PIPE):
        env = _Floor(n, url, delay_ms, pipelined=case == FLOOR_PIPE)
    else:
        env = _make(case, n, url)
        env.reset(seed=0, options={"task_spec": {"delay_ms": delay_ms, "length": LENGTH}})
        _lockstep(env, n, 0.0)
        _lockstep(env, n, 0.0)
    origin = str(Path(ors_gym.__file__).resolve().parents[1])
    print(json.dumps({"setup": time.perf_counter() - started, "ors_gym": origin}), flush=True)
    for command in sys.stdin:
        if not command.startswith("run "):
            break
        seconds = float(command.split()[1])
        t0, cpu0 = time.perf_counter(), time.process_time()
        if case in (FLOOR, FLOOR_PIPE):
            steps = env.run(seconds)
        elif case == PIPE:
            steps = _pipelined(env, n, seconds)
        else:
            steps = _lockstep(env, n, seconds)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        print(json.dumps({"env_steps": steps, "seconds": elapsed, "cpu": cpu}), flush=True)
    env.close()


def main(argv: Sequence[str]) -> None:
    case, n, url, delay_ms = argv[:4]
    child(case, int(n), url, float(delay_ms))


if __name__ == "__main__":
    main(sys.argv[1:])
