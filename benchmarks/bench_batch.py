"""Token episodes in a batch: TRL's ``rollout_func`` against a slow environment, and the
connections and discoveries veRL's samples cost.

**rollout_func**: one ``OrsSpec(...).rollout_func`` call of a group of G prompts
(G = 1, 8, 32) against ``SlowStart`` (``_slow_env``: a 1 s ``setup`` and a 1 s
``wait`` tool, two turns an episode), served by an SDK server in its own
process. The trainer is a stand-in whose vLLM answers every prompt at once
with a ``wait`` call (no model: what is left is the environment's time and the
client's own work). Reported per G: the call's wall time over one episode's
(G = 1, same run), which is the environment time per turn against one call's
(target: within 1.3x), and the client's CPU per episode-turn (this process,
every thread). ``--baseline REF`` runs the same over ``REF``'s tree (this file
and ``_slow_env`` copied into it), interleaved in the same run.

**verl**: 100 samples as veRL's agent loop opens them, in waves of 10 at once
(each: open the row's episode, one step, give it back), against an SDK server
whose ASGI app counts the TCP connections (client ports) and the ``/tools``
discoveries it sees: the loop before this change (an ``AsyncOrsEnv`` and
backend per sample) against ``AsyncTokenBatch`` over the
loop's ``shared_pool()``.

Run: ``python -m benchmarks.bench_batch`` (``--quick``: G = 8 only, one round;
``--baseline e6a2f51``; ``--json PATH``). Needs the ``trl`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import child_env, format_rows, row, served_process, write_json

ENV_SPEC = "benchmarks._slow_env:SlowStart"
TURNS = 2
TARGET = 1.3
SAMPLES, WAVE = 100, 10


def _tokenizer() -> Any:
    from benchmarks._tiny_lm import tokenizer, tool_call

    return tokenizer(["ors/Counter-v0"], [tool_call("wait", {})], tasks=1)


def _trainer(tok: Any, limit: int = 256) -> Any:
    """What ``rollout_func`` reads of a ``GRPOTrainer``, with a stand-in vLLM that answers
    every prompt with a ``wait`` call."""
    from benchmarks._tiny_lm import tool_call

    wait = [*tok(tool_call("wait", {}), add_special_tokens=False)["input_ids"],
            tok.eos_token_id]

    class Generation:
        max_completion_length = limit

        def generate(self, prompts: list[list[int]], images: Any, num_generations: int,
                     profiler: Any = None) -> tuple[Any, ...]:
            return prompts, [wait for _ in prompts], [[[-0.5]] * len(wait) for _ in prompts], None

    return SimpleNamespace(
        use_vllm=True, vllm_generation=Generation(), processing_class=tok,
        accelerator=SimpleNamespace(num_processes=1),
        args=SimpleNamespace(max_completion_length=limit, chat_template_kwargs=None))


def rollout_rows(groups: list[int], rounds: int) -> list[dict[str, Any]]:
    """One row per group size: wall time and client CPU per call, G = 1 as the reference."""
    import ors_gym  # noqa: F401  (registers the ors/ ids)
    from ors_gym.trl import OrsSpec

    tok = _tokenizer()
    trainer = _trainer(tok)
    sizes = sorted({1, *groups})
    wall: dict[int, list[float]] = {g: [] for g in sizes}
    cpu: dict[int, list[float]] = {g: [] for g in sizes}
    with served_process([ENV_SPEC]) as (_, url):
        spec = OrsSpec("ors/Remote-v0", base_url=url, env_name="slowstart")
        prompts = list(spec.train_dataset["prompt"])
        spec.rollout_func(prompts[:1], trainer)  # warm: imports, the bridge, the pool
        for r in range(rounds):
            for g in sizes[r % len(sizes):] + sizes[: r % len(sizes)]:
                group = [prompts[k % len(prompts)] for k in range(g)]
                c, t = time.process_time(), time.perf_counter()
                out = spec.rollout_func(group, trainer)
                wall[g].append(time.perf_counter() - t)
                cpu[g].append(time.process_time() - c)
                assert out["ors_return"] == [1.0] * g, out["ors_return"]
        close = getattr(spec.rollout_func, "close", None)
        if close is not None:
            close()
    one = statistics.median(wall[1])
    rows = []
    for g in sizes:
        w = statistics.median(wall[g])
        per_turn_ms = statistics.median(cpu[g]) * 1000 / (g * TURNS)
        rows.append(row("batch", f"rollout_func G={g}", w, one, w / one, "s/call",
                        "one episode's call (G=1)", group=g, turns=TURNS,
                        env_s_per_turn=round(w / (TURNS + 1), 3),
                        client_cpu_ms_per_episode_turn=round(per_turn_ms, 3), rounds=rounds))
    return rows


# -- veRL: connections and discoveries ------------------------------------------------------


class _Counting:
    """An ASGI app that counts the connections (client address) and requests it sees."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.clients: set[tuple[str, int]] = set()
        self.paths: dict[str, int] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            client = scope.get("client")
            if client:
                self.clients.add(tuple(client))  # type: ignore[arg-type]
            self.paths[scope["path"]] = self.paths.get(scope["path"], 0) + 1
        await self.app(scope, receive, send)


@contextmanager
def _counting_server() -> Iterator[tuple[str, _Counting]]:
    import uvicorn
    from openreward.environments import Server

    from ors_gym.envs.testing.latency import Latency

    app = _Counting(Server([Latency]).app)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           access_log=False, timeout_keep_alive=60))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def verl_rows(samples: int = SAMPLES) -> list[dict[str, Any]]:
    """Connections and discoveries per ``samples`` samples (in waves of WAVE), one
    AsyncOrsEnv per sample vs the shared backends."""
    from ors_gym import AsyncOrsEnv
    from ors_gym.envs.testing import register_test_envs
    from ors_gym.registration import async_env_arguments
    from ors_gym.tokens import AsyncTokenBatch, AsyncTokenEnv, EpisodeRow, shared_pool

    register_test_envs()  # ors/Latency-v0, the environment the rows name
    tok = _tokenizer()
    wait = [*tok('<tool_call>\n{"name": "wait", "arguments": {}}\n</tool_call>',
                 add_special_tokens=False)["input_ids"], tok.eos_token_id]
    counts: dict[str, tuple[int, int]] = {}
    for case in ("a backend per sample", "shared_pool()"):
        with _counting_server() as (url, app):
            row_ = EpisodeRow("ors/Latency-v0", {"base_url": url}, {"index": 0})

            async def old_way(r: EpisodeRow = row_) -> None:
                env = AsyncTokenEnv(AsyncOrsEnv(**async_env_arguments(r.env_id, r.env_kwargs)),
                                    tok)
                try:
                    await env.reset(options=r.options)
                    await env.step(wait)
                finally:
                    await env.close()

            async def new_way(r: EpisodeRow = row_) -> None:
                batch = AsyncTokenBatch(tok, pool=shared_pool())
                try:
                    await batch.reset([r])
                    await batch.step([wait])
                finally:
                    await batch.close()

            async def run(one: Any = old_way if case.startswith("a ") else new_way) -> None:
                for _ in range(samples // WAVE):
                    await asyncio.gather(*(one() for _ in range(WAVE)))
                await shared_pool().aclose()

            asyncio.run(run())
            discoveries = sum(n for p, n in app.paths.items() if p.endswith("/tools"))
            counts[case] = (len(app.clients), discoveries)
    old_c, old_d = counts["a backend per sample"]
    rows = []
    for case, (conns, disc) in counts.items():
        rows.append(row("batch", f"veRL {case}: connections", conns, old_c, conns / old_c,
                        f"/{samples}", "a backend per sample", samples=samples, wave=WAVE))
        rows.append(row("batch", f"veRL {case}: discoveries", disc, old_d, disc / old_d,
                        f"/{samples}", "a backend per sample", samples=samples, wave=WAVE))
    return rows


# -- the baseline tree --------------------------------------------------------------------------


def baseline(ref: str, argv: list[str]) -> tuple[list[dict[str, Any]], str]:
    """This benchmark's rollout rows over ``ref``'s ors_gym (this file and the slow
    environment copied into its tree)."""
    from benchmarks._vector_procs import ref_tree

    here = Path(__file__).resolve().parent
    with ref_tree(ref) as (tree, commit), tempfile.TemporaryDirectory() as tmp:
        for name in ("bench_batch.py", "_slow_env.py"):
            shutil.copy(here / name, Path(tree) / "benchmarks" / name)
        out = Path(tmp) / "rows.json"
        subprocess.run([sys.executable, "-m", "benchmarks.bench_batch", *argv, "--no-verl",
                        "--json", str(out)], cwd=tree, env=child_env([str(tree)]), check=True,
                       stdout=subprocess.DEVNULL)
        return json.loads(out.read_text()), commit


def run(groups: tuple[int, ...] = (8, 32), rounds: int = 2, samples: int = SAMPLES
        ) -> list[dict[str, Any]]:
    """The rollout rows (no baseline tree) and the veRL counts over ``samples`` samples."""
    return rollout_rows(list(groups), rounds) + verl_rows(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="G = 8 only, one round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--groups", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--baseline", metavar="REF", help="also run REF's tree, e.g. e6a2f51")
    parser.add_argument("--no-verl", action="store_true", help="skip the veRL counts")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    groups, rounds = ([8], 1) if args.quick else (args.groups, args.rounds)
    rows = rollout_rows(groups, rounds)
    if args.baseline:
        child = ["--rounds", str(rounds), "--groups", *map(str, groups)]
        base, commit = baseline(args.baseline, child)
        by_case = {b["case"]: b for b in base}
        for r in rows:
            b = by_case.get(r["case"])
            if b is not None:
                r["baseline_ratio"] = b["ratio"]
                r["cpu_x_baseline"] = round(r["client_cpu_ms_per_episode_turn"]
                                            / b["client_cpu_ms_per_episode_turn"], 3)
        rows += [{**b, "case": f"{b['case']}@{args.baseline}", "commit": commit} for b in base]
    if not args.no_verl:
        rows += verl_rows()
    print(format_rows(rows))
    for r in rows:
        if "client_cpu_ms_per_episode_turn" in r:
            extra = (f"; x baseline CPU {r['cpu_x_baseline']}, baseline's ratio "
                     f"{r['baseline_ratio']:.2f}" if "cpu_x_baseline" in r else "")
            print(f"{r['case']}: {r['ors_gym']:.1f} s per call, {r['ratio']:.2f}x one episode's; "
                  f"client CPU {r['client_cpu_ms_per_episode_turn']} ms per episode-turn{extra}")
    for r in rows:
        if r["case"].startswith("rollout_func G=") and r["group"] > 1 and "@" not in r["case"]:
            ok = r["ratio"] <= TARGET
            print(f"target: {r['case']} within {TARGET}x one call: {r['ratio']:.2f}x "
                  f"({'met' if ok else 'MISSED'})")
    if args.json:
        write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
