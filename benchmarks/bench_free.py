"""Free-running token episodes against lockstep, when tool latency varies call to call.

A group of N episodes (N = 8, 32) of 4 turns each on the ``Latency`` test
environment, served by an SDK server in its own process, every call's delay
drawn at random from 0.1-2 s (``task_spec["delays_ms"]``, the same draws for
both forms). The sampler answers at once with a ``wait`` call, so what is left
is the environment's time and the client's. Two forms of ``AsyncTokenBatch``:

- lockstep: ``reset`` then ``step`` of every running episode together, as
  ``rollout_func`` does; a turn ends when its slowest call returns, so a group
  takes the sum over turns of the slowest call;
- free-running: ``run_free``, each episode sampling its next turn as soon as
  its own call returns; a group takes the slowest episode's own total.

Reported per N, medians over rounds: each form's wall time per group against the
slowest episode's own total of delays (the floor; target for free-running:
within 1.2x), and free-running's wall time against lockstep's.

Run: ``python -m benchmarks.bench_free`` (``--quick``: one round; ``--json PATH``).
Needs transformers (the tiny tokenizer).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

from benchmarks._common import format_rows, row, served, write_json

TURNS = 4
TARGET = 1.2
LATENCY = "ors_gym.envs.testing.latency:Latency"


def _tokenizer() -> Any:
    from benchmarks._tiny_lm import tokenizer, tool_call

    return tokenizer(["ors/Counter-v0"], [tool_call("wait", {})], tasks=1)


async def _group(url: str, tok: Any, delays: list[list[int]], free: bool) -> float:
    """One group's wall time, in seconds."""
    from benchmarks._tiny_lm import tool_call
    from ors_gym.tokens import AsyncTokenBatch, EpisodeRow

    wait = [*tok(tool_call("wait", {}), add_special_tokens=False)["input_ids"], tok.eos_token_id]
    rows = [EpisodeRow("ors/Latency-v0", {"base_url": url},
                       {"task_spec": {"delays_ms": d, "length": TURNS}}) for d in delays]
    async with AsyncTokenBatch(tok) as batch:
        start = time.perf_counter()
        if free:
            async with aclosing(batch.run_free(rows, _Waits(wait))) as ended:
                done = [e async for e in ended]
            assert all(e.trajectory.turns == TURNS for e in done)
        else:
            await batch.reset(rows)
            while running := batch.running:
                await batch.step([wait if k in running else None for k in range(len(rows))])
            assert all(t.turns == TURNS for t in batch.trajectories)
        return time.perf_counter() - start


class _Waits:
    """A ``TokenSampler`` answering every prompt at once with a ``wait`` call."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Any:
        from ors_gym.sampling import Sample

        return Sample(list(self.ids), None, "stop")

    async def aclose(self) -> None:
        return None


def run(sizes: tuple[int, ...] = (8, 32), rounds: int = 3, seed: int = 0,
        delays_ms: tuple[int, int] = (100, 2000)) -> list[dict[str, Any]]:
    """Rows per N; every call's delay drawn from ``delays_ms`` (low, high)."""
    from ors_gym.envs.testing import register_test_envs

    register_test_envs()
    tok = _tokenizer()
    rng = random.Random(seed)
    rows = []
    with served([LATENCY]) as url:
        for n in sizes:
            free_x, lock_x, vs = [], [], []
            for _ in range(rounds):
                delays = [[rng.randint(*delays_ms) for _ in range(TURNS)] for _ in range(n)]
                floor = max(sum(d) for d in delays) / 1000
                free = asyncio.run(_group(url, tok, delays, free=True))
                lock = asyncio.run(_group(url, tok, delays, free=False))
                free_x.append(free / floor)
                lock_x.append(lock / floor)
                vs.append(free / lock)
            rows.append(row("free", f"free-running N={n}", statistics.median(free_x), 1.0,
                            statistics.median(free_x), "x floor", "slowest episode's own total",
                            n=n, kind="free"))
            rows.append(row("free", f"lockstep N={n}", statistics.median(lock_x), 1.0,
                            statistics.median(lock_x), "x floor", "slowest episode's own total",
                            n=n, kind="lockstep"))
            rows.append(row("free", f"free vs lockstep N={n}", statistics.median(vs), 1.0,
                            statistics.median(vs), "ratio", "lockstep's wall time",
                            n=n, kind="versus"))
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        if r["kind"] == "free":
            ok = r["ratio"] <= TARGET
            out.append(f"target: {r['case']} within {TARGET}x the slowest episode's own total: "
                       f"{r['ratio']:.2f}x ({'met' if ok else 'MISSED'})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = run(rounds=1 if args.quick else 3)
    print(format_rows(rows))
    for line in verdicts(rows):
        print(line)
    if args.json:
        write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
