"""The capture gateway's own cost per turn against its backend's, and sessions per process.

Own cost: one agent (raw HTTP, OpenAI Chat Completions) plays ``TURNS`` turns of a
growing tool-calling conversation through the gateway, whose backend is a
vLLM-shaped ``/v1/completions`` stand-in answering scripted ids at once (so the
backend's time is its serving floor: HTTP and JSON, no model); the agent, the gateway
and the backend each run in a process of their own, as deployed. After each turn the
same prompt ids the gateway sent are posted to the backend directly; the gateway's
own time per turn is the gateway turn minus that direct call (its HTTP hop in, reading
the request, rendering the new messages, its call to the backend, parsing the
completion, the reply). Reported: median per turn over all turns and rounds, and the
ratio own / backend, both from this run. A real model's turn takes far longer than
this backend's floor, so the ratio bounds the gateway's share of a turn from above.
A third row weighs CPU: the gateway process's a turn (all its work, its client call to
the backend included) against the backend process's a request, each read with
``time.process_time`` in the process itself, which a loaded machine does not move as
it moves wall time.

Sessions per process: the gateway runs in a child process over a stand-in sampler
that awaits ``COST_MS`` (2 s) a turn in the gateway (no HTTP: a GPU's time, so what
is measured is the gateway's own ceiling); N agents in ``AGENT_PROCESSES`` processes of
their own (aiohttp) each start at a random offset within one turn's cost (a steady
load) and play ``SESSION_TURNS`` turns. Reported per N: the rate the sessions get (each
session's turns over its own time, summed) against the ideal N / cost, and their
ratio (1.0: the gateway adds no queueing); each session's median time per turn; the
gateway process's CPU per turn (HTTP, JSON, rendering, parsing, and the sessions'
opening and closing: ``time.process_time`` read in the child, where a count in clock
ticks can read 0 over a short run), and the sessions one core would sustain at this
cost (cost / CPU per turn). The agents share the machine's cores with
the gateway, so on a loaded machine the ratio at large N falls with the CPU the
gateway gets; the CPU figure is the gateway's own. The sessions' sockets count
against the open-file limit: both sides raise their soft limit to the hard one.

Targets (same run): the gateway's own time per turn at most 1.0x the backend's
floor; at 2 s a turn, at least 0.9 of the ideal rate at 256 sessions and 0.8 at
1,024 (printed as verdicts under the table).

Run: ``python -m benchmarks.bench_gateway`` (``--quick`` for a short run,
``--own-only`` for the own-cost rows alone, ``--json PATH`` to save the rows). Needs
the ``gateway`` and ``trl`` extras.
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, child_env, format_rows, row, write_json

TURNS = 8
#: The stand-in sampler's time per turn in the sessions rows (a GPU's, for a long turn).
COST_MS = 2000.0
SESSIONS = (16, 256, 1024)
SESSION_TURNS = 6
AGENT_PROCESSES = 2
#: The targets: own / backend floor at most; fraction of the ideal rate at least, by N.
OWN_TARGET = 1.0
RATE_TARGETS = {256: 0.9, 1024: 0.8}
PROMPT = "The counter is at 0. Make it equal 40 using increment, then say done."
#: Single ids in Qwen3's own tokenizer, so the gateway reads turns as it would Qwen3's
#: (the family's renderer, not the chat-template fallback).
QWEN3_TAGS = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>",
              "</tool_response>")
TOOLS = [{"type": "function", "function": {"name": "increment", "description": "Add 1 to 5.",
          "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}}}}]


def _tokenizer() -> Any:
    from benchmarks._tiny_lm import tokenizer, tool_call

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    reply = "<think>\nFive more.\n</think>\n\n" + tool_call("increment", {"amount": 5})
    return tokenizer(["ors/Counter-v0"], [reply], tasks=2, added=QWEN3_TAGS), reply


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


def _serve_stdin() -> None:
    """A child's main thread while it serves: each line on stdin asks for the process's
    CPU seconds so far (``time.process_time``, precise where psutil counts clock ticks);
    stdin closed ends it."""
    for _ in sys.stdin:
        print(time.process_time(), flush=True)


@contextmanager
def _child(*args: str) -> Iterator[tuple[str, Callable[[], float]]]:
    """``python -m benchmarks.bench_gateway ARGS`` in a process of its own: yields the URL
    it prints once serving and a function reading its CPU seconds so far; its stdin
    closed on exit stops it."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_gateway", *args],
                            cwd=ROOT, env=child_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the child {args[0]} did not start (exit {proc.wait()})")

        def cpu() -> float:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("cpu\n")
            proc.stdin.flush()
            return float(proc.stdout.readline())

        yield url, cpu
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)


def backend_child(ids: list[int]) -> None:
    """The backend's process: the vLLM-shaped stand-in answering ``ids``."""
    with _Served(_backend_app(ids)) as url:
        print(url, flush=True)
        _serve_stdin()


def gateway_child(tokenizer_dir: str, backend_url: str) -> None:
    """The gateway's process, over the backend at ``backend_url`` (vLLM's client)."""
    from transformers import AutoTokenizer

    from ors_gym.gateway import Gateway, GatewayThread
    from ors_gym.sampling import VllmCompletions

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    gateway = Gateway(tok, VllmCompletions(backend_url, "tiny"), model="tiny")
    with GatewayThread(gateway) as served:
        print(served.url, flush=True)
        _serve_stdin()


def own_cost(rounds: int, turns: int) -> list[dict[str, Any]]:
    """Rows: the gateway's own time per turn against the backend's, medians in µs. The
    agent (this process), the gateway and the backend each run in a process of their
    own, as deployed."""
    import json
    import tempfile

    import httpx
    tok, reply = _tokenizer()
    with tempfile.TemporaryDirectory() as folder:
        tok.save_pretrained(folder)
        with _child("--backend", json.dumps(_reply_ids(tok, reply))) as (backend_url, b_cpu), \
                _child("--gateway", folder, backend_url) as (url, g_cpu), httpx.Client() as http:
            through, direct = [], []
            for _ in range(rounds + 1):  # the first round warms caches and is dropped
                session = http.post(f"{url}/sessions").json()
                chat = f"{session['openai_base_url']}/chat/completions"
                messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
                g_round, b_round = [], []
                for turn in range(1, turns + 1):
                    start = time.perf_counter()
                    answer = http.post(chat, json={"model": "tiny", "messages": messages,
                                                   "tools": TOOLS}).json()
                    g_round.append(time.perf_counter() - start)
                    last = http.get(f"{url}/sessions/{session['id']}").json()["rows"][-1]
                    row_ids = [*last["prompt_ids"], *last["completion_ids"]]
                    prompt = row_ids[: len(row_ids) - answer["usage"]["completion_tokens"]]
                    start = time.perf_counter()
                    http.post(f"{backend_url}/v1/completions", json={
                        "model": "tiny", "prompt": prompt, "max_tokens": 64,
                        "return_token_ids": True, "logprobs": 0}).raise_for_status()
                    b_round.append(time.perf_counter() - start)
                    _next(messages, answer, turn)
                http.delete(f"{url}/sessions/{session['id']}")
                through.append(g_round)
                direct.append(b_round)
            cpu = _cpu_per_turn(http, url, turns, max(4 * rounds, 8), g_cpu, b_cpu)
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
        row("gateway", "gateway CPU a turn", cpu[0], cpu[1], cpu[0] / cpu[1], "us/turn",
            "backend CPU a request", turns=turns, sessions=cpu[2]),
    ]


def _cpu_per_turn(http: Any, url: str, turns: int, sessions: int,
                  gateway: Callable[[], float], backend: Callable[[], float]
                  ) -> tuple[float, float, int]:
    """CPU per turn (µs) of the gateway's process and of the backend's, over ``sessions``
    sessions of ``turns`` turns played one after another (opened before and closed after
    the count); each turn is one request to the backend. A process's CPU counts only its
    own work, so this figure holds on a loaded machine where the wall-clock rows do not."""
    opened = [http.post(f"{url}/sessions").json() for _ in range(sessions)]
    g0, b0 = gateway(), backend()
    for session in opened:
        chat = f"{session['openai_base_url']}/chat/completions"
        messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
        for turn in range(1, turns + 1):
            answer = http.post(chat, json={"model": "tiny", "messages": messages,
                                           "tools": TOOLS})
            _next(messages, answer.json(), turn)
    g1, b1 = gateway(), backend()
    for session in opened:
        http.delete(f"{url}/sessions/{session['id']}")
    n = sessions * turns
    return (g1 - g0) * 1e6 / n, (b1 - b0) * 1e6 / n, sessions


def serve_child(cost_ms: float) -> None:
    """The gateway's process: a gateway over a stand-in sampler that awaits ``cost_ms`` a
    turn (no HTTP: the gateway's own ceiling is measured); prints its URL, serves until
    its stdin closes, answering each line with its CPU seconds (``_serve_stdin``)."""
    from ors_gym.gateway import Gateway, GatewayThread
    from ors_gym.sampling import Sample

    _raise_fd_limit()
    tok, reply = _tokenizer()
    ids = _reply_ids(tok, reply)

    class FixedCost:
        async def sample(self, prompt_ids: Sequence[int], **_: Any) -> Sample:
            await asyncio.sleep(cost_ms / 1000)
            return Sample(ids=list(ids), logprobs=[-0.5] * len(ids), finish_reason="stop")

        async def aclose(self) -> None:
            return None

    gateway = Gateway(tok, FixedCost(), model="tiny", max_in_flight=8192)
    with GatewayThread(gateway) as served:
        print(served.url, flush=True)
        _serve_stdin()


def _raise_fd_limit() -> None:
    """The soft limit on open files raised to the hard one: a socket per session."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _play_sessions(url: str, n: int, turns: int, cost_ms: float, seed: int
                         ) -> dict[str, Any]:
    """One agent process's share: ``n`` sessions opened, then (on ``go`` from stdin) each
    starts after its own random offset within one turn's cost (so turns arrive spread as
    a steady load, not all at once) and plays ``turns`` turns over aiohttp (its C parser
    keeps the agents' own CPU small). Each session's seconds from its first send to its
    last answer, and the whole span on the shared monotonic clock."""
    import random

    import aiohttp

    offsets = random.Random(seed)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=600)) as http:
        opened = []
        for _ in range(n):
            async with http.post(f"{url}/sessions") as answer:
                opened.append(await answer.json())
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # "go"
        failed: list[str] = []

        async def play(session: dict[str, Any], offset: float) -> float:
            await asyncio.sleep(offset)
            start = time.monotonic()
            messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
            for turn in range(1, turns + 1):
                async with http.post(f"{session['openai_base_url']}/chat/completions",
                                     json={"model": "tiny", "messages": messages,
                                           "tools": TOOLS}) as answer:
                    if answer.status != 200:
                        failed.append(f"{answer.status}: {(await answer.text())[:200]}")
                        break
                    _next(messages, await answer.json(), turn)
            return time.monotonic() - start

        start = time.monotonic()
        took = await asyncio.gather(*(play(s, offsets.uniform(0, cost_ms / 1000))
                                      for s in opened))
        end = time.monotonic()
        for s in opened:
            async with http.delete(f"{url}/sessions/{s['id']}"):
                pass
    return {"start": start, "end": end, "took": took, "failed": failed}


def agents_child(url: str, n: int, turns: int, cost_ms: float, seed: int) -> None:
    """An agent process: see :func:`_play_sessions`; prints its result as JSON."""
    import json

    _raise_fd_limit()
    print(json.dumps(asyncio.run(_play_sessions(url, n, turns, cost_ms, seed))), flush=True)


def _agents(url: str, n: int, turns: int, processes: int, cost_ms: float
            ) -> tuple[list[float], float]:
    """``n`` sessions in ``processes`` agent processes, started together: each session's
    seconds for its turns, and the whole span (first send to last answer)."""
    import json

    shares = [n // processes + (1 if k < n % processes else 0) for k in range(processes)]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_gateway", "--agents", url, str(share),
         str(turns), str(cost_ms), str(k)], cwd=ROOT, env=child_env(), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True) for k, share in enumerate(shares) if share]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"an agent process failed to open its sessions "
                                   f"(exit {p.wait()})")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            assert p.stdout is not None
            results.append(json.loads(p.stdout.readline()))
        failed = [f for r in results for f in r["failed"]]
        if failed:
            raise RuntimeError(f"{len(failed)} sessions failed a turn, e.g. {failed[0]}")
        span = max(r["end"] for r in results) - min(r["start"] for r in results)
        return [t for r in results for t in r["took"]], float(span)
    finally:
        for p in procs:
            p.wait(timeout=60)


def sessions_per_process(sessions: Sequence[int], turns: int, cost_ms: float,
                         agents: int = AGENT_PROCESSES) -> list[dict[str, Any]]:
    """Rows: turns/s with N sessions at once against the ideal N / cost, the agents in
    ``agents`` processes of their own."""
    with _child("--serve", str(cost_ms)) as (url, server_cpu):
        rows = []
        _agents(url, 1, 2, 1, 0.0)  # warm-up
        for n in sessions:
            procs = min(agents, n)
            before = server_cpu()
            took, span = _agents(url, n, turns, procs, cost_ms)
            cpu_ms = (server_cpu() - before) * 1000
            per_turn = cpu_ms / (n * turns)  # the sessions' opening and closing included
            # Each session's own rate summed: the steady rate the N sessions get.
            rate, ideal = sum(turns / t for t in took), n * 1000 / cost_ms
            rows.append(row("gateway", f"{n} sessions at {cost_ms:g} ms/turn", rate, ideal,
                            rate / ideal, "turns/s", "ideal: N / per-turn cost",
                            sessions=n, turns=turns, agent_processes=procs,
                            turn_ms_p50=round(1000 * statistics.median(took) / turns, 1),
                            turn_ms_max=round(1000 * max(took) / turns, 1),
                            span_s=round(span, 2),
                            server_cpu_ms_per_turn=round(per_turn, 3),
                            sessions_per_core=round(cost_ms / per_turn, 1)))
    return rows


#: ``--quick``: fewer rounds and turns, the two session counts the targets name.
QUICK: dict[str, Any] = {"rounds": 2, "turns": 4, "sessions": (256, 1024), "session_turns": 4}


def run(*, rounds: int = 5, turns: int = TURNS, sessions: Sequence[int] = SESSIONS,
        cost_ms: float = COST_MS, session_turns: int = SESSION_TURNS
        ) -> list[dict[str, Any]]:
    """Every row of this benchmark."""
    return [*own_cost(rounds, turns),
            *(sessions_per_process(sessions, session_turns, cost_ms) if sessions else [])]


def verdicts(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per target this run's rows measure: met or missed."""
    out = []
    for r in rows:
        if r["case"].startswith("gateway own"):
            ok = r["ratio"] <= OWN_TARGET
            out.append(f"target: the gateway's own time per turn at most {OWN_TARGET}x the "
                       f"backend's floor: {r['ratio']:.2f}x ({'met' if ok else 'MISSED'})")
        if r["case"] == "gateway CPU a turn":
            ok = r["ratio"] <= OWN_TARGET
            out.append(f"target, on CPU: the gateway's CPU a turn at most {OWN_TARGET}x the "
                       f"backend's a request: {r['ratio']:.2f}x ({'met' if ok else 'MISSED'})")
        target = RATE_TARGETS.get(r.get("sessions", 0))
        if target is not None and r.get("turns") and "ms/turn" in r["case"]:
            ok = r["ratio"] >= target
            out.append(f"target: {r['sessions']} sessions at least {target} of the ideal "
                       f"rate: {r['ratio']:.2f} ({'met' if ok else 'MISSED'})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and sessions")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--own-only", action="store_true",
                        help="only the own-cost rows (no sessions rows)")
    parser.add_argument("--sessions", type=int, nargs="+", default=None,
                        help=f"session counts of the sessions rows (default {SESSIONS})")
    parser.add_argument("--serve", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--agents", nargs=5, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--backend", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--gateway", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve_child(args.serve)
        return 0
    if args.backend is not None:
        import json

        backend_child(json.loads(args.backend))
        return 0
    if args.gateway is not None:
        gateway_child(*args.gateway)
        return 0
    if args.agents is not None:
        url, n, turns, cost, seed = args.agents
        agents_child(url, int(n), int(turns), float(cost), int(seed))
        return 0
    settings: dict[str, Any] = QUICK if args.quick else {}
    if args.sessions:
        settings = {**settings, "sessions": tuple(args.sessions)}
    if args.own_only:
        settings = {**settings, "sessions": ()}
    rows = run(**settings)
    print(format_rows(rows))
    for r in rows:
        if "sessions_per_core" in r:
            print(f"{r['case']}: {r['turn_ms_p50']} ms a turn (median session), gateway CPU "
                  f"{r['server_cpu_ms_per_turn']} ms/turn, {r['sessions_per_core']} "
                  "sessions per core at this per-turn cost")
    for line in verdicts(rows):
        print(line)
    if args.json is not None:
        write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
