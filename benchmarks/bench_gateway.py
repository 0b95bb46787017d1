"""The capture gateway's own cost per turn against its backend's, and sessions per process.

Own cost: one agent (raw HTTP, OpenAI Chat Completions) plays ``TURNS`` turns of a
growing tool-calling conversation through the gateway, whose backend is a
vLLM-shaped ``/v1/completions`` stand-in answering scripted ids at once (so the
backend's time is its serving floor: HTTP and JSON, no model). After each turn the
same prompt ids the gateway sent are posted to the backend directly; the gateway's
own time per turn is the gateway turn minus that direct call (rendering the new
messages, parsing the completion, the reply, its own HTTP hop). Reported: median
per turn over all turns and rounds, and the ratio own / backend, both from this run.
A real model's turn takes far longer than this backend's floor, so the ratio bounds
the gateway's share of a turn from above.

Sessions per process: the gateway runs in a child process over a sampler that
costs a fixed ``COST_MS`` per turn (an awaited sleep, no HTTP); N agents (async
httpx in this process) each play ``TURNS`` turns at once. Reported per N: turns/s
against the ideal N / cost, and their ratio (1.0: the gateway adds no queueing); the
gateway process's CPU per turn (HTTP, JSON, rendering, parsing: psutil's count of the
child), and the sessions one core sustains at this cost (cost / CPU per turn). The
agents share the machine's cores with the gateway, so the achieved rate is a floor;
the CPU figure is the gateway's own.

Run: ``python -m benchmarks.bench_gateway`` (``--quick`` for a short run, ``--json
PATH`` to save the rows). Needs the ``gateway`` and ``trl`` extras.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, child_env, format_rows, row, write_json

TURNS = 8
COST_MS = 50.0
SESSIONS = (1, 16, 64, 256)
PROMPT = "The counter is at 0. Make it equal 40 using increment, then say done."
TOOLS = [{"type": "function", "function": {"name": "increment", "description": "Add 1 to 5.",
          "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}}}}]


def _tokenizer() -> Any:
    from benchmarks._tiny_lm import tokenizer, tool_call

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    reply = "<think>\nFive more.\n</think>\n\n" + tool_call("increment", {"amount": 5})
    return tokenizer(["ors/Counter-v0"], [reply], tasks=2), reply


def _reply_ids(tok: Any, reply: str) -> list[int]:
    return [*tok(reply, add_special_tokens=False)["input_ids"], tok.eos_token_id]


def _backend_app(ids: list[int]) -> Any:
    """A vLLM-shaped /v1/completions answering ``ids`` at once (with logprobs)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def complete(request: Request) -> JSONResponse:
        body = await request.json()
        choice = {"index": 0, "text": "", "finish_reason": "stop", "token_ids": ids,
                  "logprobs": {"token_logprobs": [-0.5] * len(ids)}}
        return JSONResponse({"id": "cmpl", "object": "text_completion",
                             "model": body.get("model"), "choices": [choice]})

    return Starlette(routes=[Route("/v1/completions", complete, methods=["POST"])])


class _Served:
    """An ASGI app under uvicorn in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        ready = threading.Event()
        while not self.server.started:
            ready.wait(0.005)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _next(messages: list[dict[str, Any]], answer: dict[str, Any], turn: int) -> None:
    message = answer["choices"][0]["message"]
    messages.append(message)
    for call in message.get("tool_calls") or ():
        messages.append({"role": "tool", "tool_call_id": call["id"],
                         "content": f"The counter is now {5 * turn}."})


def own_cost(rounds: int, turns: int) -> list[dict[str, Any]]:
    """Rows: the gateway's own time per turn against the backend's, medians in µs."""
    import httpx

    from ors_gym.gateway import Gateway, GatewayThread
    from ors_gym.sampling import VllmCompletions

    tok, reply = _tokenizer()
    with _Served(_backend_app(_reply_ids(tok, reply))) as backend_url:
        gateway = Gateway(tok, VllmCompletions(backend_url, "tiny"), model="tiny")
        with GatewayThread(gateway), httpx.Client() as http:
            through, direct = [], []
            for _ in range(rounds + 1):  # the first round warms caches and is dropped
                session = gateway.open_session()
                url = f"{session.openai_base_url}/chat/completions"
                messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
                g_round, b_round = [], []
                for turn in range(1, turns + 1):
                    start = time.perf_counter()
                    answer = http.post(url, json={"model": "tiny", "messages": messages,
                                                  "tools": TOOLS}).json()
                    g_round.append(time.perf_counter() - start)
                    traj = gateway.trajectory(session.id)
                    row_ids = traj.rows[-1].ids
                    prompt = row_ids[: len(row_ids) - answer["usage"]["completion_tokens"]]
                    start = time.perf_counter()
                    http.post(f"{backend_url}/v1/completions", json={
                        "model": "tiny", "prompt": prompt, "max_tokens": 64,
                        "return_token_ids": True, "logprobs": 0}).raise_for_status()
                    b_round.append(time.perf_counter() - start)
                    _next(messages, answer, turn)
                gateway.drop_session(session.id)
                through.append(g_round)
                direct.append(b_round)
    through, direct = through[1:], direct[1:]
    gate = statistics.median(t for r in through for t in r) * 1e6
    back = statistics.median(t for r in direct for t in r) * 1e6
    own = statistics.median(g - b for rg, rb in zip(through, direct, strict=True)
                            for g, b in zip(rg, rb, strict=True)) * 1e6
    return [
        row("gateway", "turn through the gateway", gate, back, gate / back, "us/turn",
            "the backend called directly", turns=turns, rounds=rounds),
        row("gateway", "gateway own (turn - backend)", own, back, own / back, "us/turn",
            "the backend called directly", turns=turns, rounds=rounds),
    ]


def serve_child(cost_ms: float) -> None:
    """The child process: a gateway over a fixed-cost sampler; prints its URL, serves."""
    from ors_gym.gateway import Gateway, GatewayThread
    from ors_gym.sampling import Sample

    tok, reply = _tokenizer()
    ids = _reply_ids(tok, reply)

    class FixedCost:
        async def sample(self, prompt_ids: Sequence[int], **_: Any) -> Sample:
            await asyncio.sleep(cost_ms / 1000)
            return Sample(ids=list(ids), logprobs=[-0.5] * len(ids), finish_reason="stop")

        async def aclose(self) -> None:
            return None

    gateway = Gateway(tok, FixedCost(), model="tiny", max_in_flight=4096)
    with GatewayThread(gateway) as served:
        print(served.url, flush=True)
        sys.stdin.read()  # until the parent closes our stdin


async def _agents(url: str, n: int, turns: int) -> float:
    import httpx

    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        opened = [(await http.post(f"{url}/sessions")).json() for _ in range(n)]

        async def play(session: dict[str, Any]) -> None:
            messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
            for turn in range(1, turns + 1):
                answer = await http.post(f"{session['openai_base_url']}/chat/completions",
                                         json={"model": "tiny", "messages": messages,
                                               "tools": TOOLS})
                _next(messages, answer.json(), turn)

        start = time.perf_counter()
        await asyncio.gather(*(play(s) for s in opened))
        took = time.perf_counter() - start
        for s in opened:
            await http.delete(f"{url}/sessions/{s['id']}")
    return took


def sessions_per_process(sessions: Sequence[int], turns: int, cost_ms: float
                         ) -> list[dict[str, Any]]:
    """Rows: turns/s with N sessions at once against the ideal N / cost."""
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_gateway", "--serve", str(cost_ms)],
        cwd=ROOT, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError("the gateway child did not start")
        import psutil

        server = psutil.Process(child.pid)
        rows = []
        asyncio.run(_agents(url, 1, 2))  # warm-up
        for n in sessions:
            before = server.cpu_times()
            took = asyncio.run(_agents(url, n, turns))
            after = server.cpu_times()
            cpu_ms = ((after.user + after.system) - (before.user + before.system)) * 1000
            per_turn = cpu_ms / (n * turns)
            rate, ideal = n * turns / took, n * 1000 / cost_ms
            rows.append(row("gateway", f"{n} sessions at {cost_ms:g} ms/turn", rate, ideal,
                            rate / ideal, "turns/s", "ideal: N / per-turn cost",
                            sessions=n, turns=turns, server_cpu_ms_per_turn=round(per_turn, 3),
                            sessions_per_core=round(cost_ms / per_turn, 1)))
        return rows
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)


def run(*, rounds: int = 5, turns: int = TURNS, sessions: Sequence[int] = SESSIONS,
        cost_ms: float = COST_MS) -> list[dict[str, Any]]:
    """Every row of this benchmark."""
    return [*own_cost(rounds, turns), *sessions_per_process(sessions, turns, cost_ms)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and sessions")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--serve", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve_child(args.serve)
        return 0
    rows = (run(rounds=1, turns=3, sessions=(1, 8)) if args.quick else run())
    print(format_rows(rows))
    for r in rows:
        if "sessions_per_core" in r:
            print(f"{r['case']}: gateway CPU {r['server_cpu_ms_per_turn']} ms/turn, "
                  f"{r['sessions_per_core']} sessions per core at this per-turn cost")
    if args.json is not None:
        write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
