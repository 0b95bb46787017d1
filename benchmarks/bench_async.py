"""Free-running token episodes (``OrsRolloutWorker``) against lockstep (``rollout_func``).

A group of G episodes (G = 8, 32) of one task, 4 turns each, whose tool takes its own
random time per call, 0.1 to 2 s (``Jitter``: ``Latency`` with a random delay per call;
its reward is the delay, so an episode's return is its own tool time). The environment
is an SDK server in its own process; the policy is a stand-in answering every prompt
at once with a ``wait`` call (no model: what is left is the environment's time and the
client's own work).

- **free-running**: an ``OrsRolloutWorker`` with ``max_episodes=G``: each episode
  samples its next turn as soon as its own tool returns. The first group's wall time is
  read from the worker's ``rollout/group_s`` metric (it also pays the environment's
  discovery). The client's CPU is the worker's steady work, as a trainer runs it: a
  fresh worker playing three groups one after another, less a fresh worker playing one
  (what is left is two groups' work, the worker's start taken out).
- **lockstep**: ``OrsSpec.rollout_func`` (one ``TokenBatch``, warm, every turn waits for
  the slowest tool) on G prompts of the same task; the call's wall time and CPU.

Reported per G and mode: the group's wall time over its slowest episode's own tool
time (the largest return; goal for free-running: within 1.2x), free-running's wall
time over lockstep's in the same run, and the client's CPU per episode-turn (this
process, every thread; the stand-in policy costs next to nothing) over lockstep's in
the same run (goal: at most 1.0x). Rounds interleave the two modes, so both meet the
same load. After the warm-up the heap is frozen out of the garbage collector
(``gc.freeze``): a full collection of it costs more than a group's client work and
would be charged to whichever run it fell in.

Run: ``python -m benchmarks.bench_async`` (``--quick``: G = 4, delays 5 to 100 ms, two
turns, one round, the server in this process: a check that it runs, not a measurement;
``--rounds N``; ``--groups 8 32``; ``--json PATH``). Needs the ``trl``
extra.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from openreward.environments import JSONObject, ToolOutput, tool

from benchmarks._common import format_rows, row, served_process, write_json
from ors_gym.envs._common import text_output
from ors_gym.envs.testing.latency import Latency

ENV_SPEC = "benchmarks.bench_async:Jitter"
TARGET = 1.2
#: Groups of the longer free-running run (the shorter plays one; see ``_steady``).
FREE_GROUPS = 3
CPU_TARGET = 1.0
#: The tasks: (low ms, high ms, calls). Task 0 is the benchmark's, task 1 the quick pass's.
TASKS = ((100, 2000, 4), (5, 100, 2))


class Jitter(Latency):
    """``Latency`` whose every ``wait`` takes its own random time in ``[low_ms, high_ms]``;
    the reward of a call is that time in seconds (an episode's return: its tool time)."""

    def _read_task(self, task_spec: JSONObject) -> None:
        length = task_spec.get("length", 4)
        super()._read_task({"delay_ms": 0, "length": length})
        low, high = task_spec.get("low_ms", 100), task_spec.get("high_ms", 2000)
        if not isinstance(low, int | float) or not isinstance(high, int | float) or low > high:
            raise ValueError(f"Jitter needs low_ms <= high_ms, got {low!r}, {high!r}")
        self.low_s, self.high_s = float(low) / 1000, float(high) / 1000

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        return [{"id": f"train-{i}", "low_ms": lo, "high_ms": hi, "length": n}
                for i, (lo, hi, n) in enumerate(TASKS)]

    @tool
    async def wait(self) -> ToolOutput:
        """Sleep a random time in the task's range; the episode ends after `length` calls."""
        delay = random.uniform(self.low_s, self.high_s)
        await asyncio.sleep(delay)
        self.steps += 1
        return text_output(f"waited {self.steps}", reward=delay,
                           finished=self.steps >= self.length)


class _Waits:
    """A ``TokenSampler`` answering every prompt with a ``wait`` call at once."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.calls = 0

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Any:
        from ors_gym.sampling import Sample

        self.calls += 1
        return Sample(list(self.ids), [-0.5] * len(self.ids) if logprobs else None, "stop")

    async def aclose(self) -> None:
        return None


def _free(spec: Any, tok: Any, wait_ids: list[int], g: int, task: int, groups: int = 1
          ) -> tuple[float, float, float, int]:
    """``groups`` free-running groups on a fresh worker, one after another
    (``max_episodes=G``), scoring nothing over HTTP (``score_group=False``): (the first
    group's wall s, its slowest episode's tool s, the client's CPU s, the episode-turns
    of every group). The CPU is the worker's whole run, from ``start()`` to the last
    group's last sample, its start included (see :func:`_steady` for the CPU without it)."""
    from ors_gym.tokens import EpisodeRow
    from ors_gym.trl.worker import OrsRolloutWorker

    env_id = spec.env_ids[0]
    rows = [EpisodeRow(env_id, dict(spec._kwargs[env_id]), {"index": task, "split": "train"})]
    worker = OrsRolloutWorker(rows, tok, _Waits(wait_ids), num_generations=g, max_episodes=g,
                              max_groups=groups, max_tokens=256, score_group=False)
    c = time.process_time()
    worker.start()
    try:
        samples = [worker.rollout_buffer.get(timeout=300) for _ in range(g * groups)]
        cpu = time.process_time() - c
    finally:
        worker.stop()
    assert sorted({s.group_id for s in samples}) == list(range(groups))
    reports = []
    while not worker.metrics_queue.empty():
        reports.append(worker.metrics_queue.get_nowait())
    played = [r for r in reports if "rollout/group_s" in r]
    turns = sum(int(r["rollout/turns_mean"][0]) for r in played)
    slowest = max(s.metrics["rewards/ors_return"] for s in samples if s.group_id == 0)
    return played[0]["rollout/group_s"], slowest, cpu, turns


def _steady(spec: Any, tok: Any, wait_ids: list[int], g: int, task: int
            ) -> tuple[float, float, float, int]:
    """The free-running figures with the worker's steady CPU: a run of one group and a
    run of ``FREE_GROUPS`` groups on fresh workers, the CPU and episode-turns of the
    first taken from the second's. A worker's start (its thread and loop, its
    connections, the environment's discovery) is paid once in a trainer's run, and
    lockstep's warm call does not pay it; the difference leaves the groups' own work.
    The wall time and slowest episode are the longer run's first group's."""
    _, _, cpu_one, turns_one = _free(spec, tok, wait_ids, g, task, 1)
    wall, slowest, cpu, turns = _free(spec, tok, wait_ids, g, task, FREE_GROUPS)
    return wall, slowest, cpu - cpu_one, turns - turns_one


def _lockstep(spec: Any, trainer: Any, prompt: Any, g: int) -> tuple[float, float, float, int]:
    """One lockstep group through ``rollout_func``: the same four figures."""
    c, t = time.process_time(), time.perf_counter()
    out = spec.rollout_func([prompt] * g, trainer)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    turns = sum(traj.turns for traj in out["ors_trajectory"])
    return wall, max(out["ors_return"]), cpu, turns


@contextmanager
def _served(quick: bool) -> Iterator[str]:
    """The environment's URL: a server process of its own (its CPU is not the client's),
    or for the quick pass one in this process (no process to start)."""
    if quick:
        from ors_gym.serving import ServerThread

        with ServerThread([Jitter]) as server:
            yield server.url
    else:
        with served_process([ENV_SPEC]) as (_, url):
            yield url


def run(groups: tuple[int, ...] = (8, 32), rounds: int = 3, quick: bool = False
        ) -> list[dict[str, Any]]:
    """Rows per G: free-running and lockstep, wall over the slowest episode's own time."""
    import ors_gym  # noqa: F401  (registers the ors/ ids)
    from benchmarks._tiny_lm import tool_call
    from benchmarks.bench_batch import _tokenizer, _trainer
    from ors_gym.trl import OrsSpec

    task = 1 if quick else 0
    tok = _tokenizer()
    trainer = _trainer(tok)
    wait_ids = [*tok(tool_call("wait", {}), add_special_tokens=False)["input_ids"],
                tok.eos_token_id]
    figures: dict[tuple[str, int], list[tuple[float, float, float, int]]] = {}
    with _served(quick) as url:
        spec = OrsSpec("ors/Remote-v0", base_url=url, env_name="jitter", indices=[task])
        prompt = spec.train_dataset["prompt"][0]
        _lockstep(spec, trainer, prompt, 1)  # warm: imports, the bridge, the pool
        _free(spec, tok, wait_ids, 1, task)
        # The warm heap (torch, transformers, the tokenizer) is frozen out of the cyclic
        # collector while the rounds run: a full collection walks it for hundreds of
        # milliseconds, more than a whole group's client work, whichever mode is running.
        gc.collect()
        gc.freeze()
        try:
            for r in range(rounds):
                for g in groups:
                    modes = ("free", "lockstep") if r % 2 == 0 else ("lockstep", "free")
                    for mode in modes:
                        got = (_steady(spec, tok, wait_ids, g, task) if mode == "free"
                               else _lockstep(spec, trainer, prompt, g))
                        figures.setdefault((mode, g), []).append(got)
        finally:
            gc.unfreeze()  # the benchmarks run after this one meet the collector as it was
        close = getattr(spec.rollout_func, "close", None)
        if close is not None:
            close()
    cpu = {key: (sum(f[2] for f in runs), sum(f[3] for f in runs))
           for key, runs in figures.items()}
    rows = []
    for g in groups:
        lock_wall = statistics.median(f[0] for f in figures[("lockstep", g)])
        lock_cpu_ms = 1000 * cpu[("lockstep", g)][0] / cpu[("lockstep", g)][1]
        for mode, name in (("free", "OrsRolloutWorker (free-running)"),
                           ("lockstep", "rollout_func (lockstep)")):
            runs = figures[(mode, g)]
            ratios = [wall / slowest for wall, slowest, _, _ in runs]
            wall = statistics.median(f[0] for f in runs)
            cpu_ms = 1000 * cpu[(mode, g)][0] / cpu[(mode, g)][1]
            per_round = [(c / t) / (lc / lt) for (_, _, c, t), (_, _, lc, lt)
                         in zip(runs, figures[("lockstep", g)], strict=True)]
            rows.append(row(
                "async", f"{name} G={g}", statistics.median(ratios), 1.0,
                statistics.median(ratios), "x slowest episode", "slowest episode's own tool time",
                group=g, rounds=rounds, wall_s=round(wall, 3),
                wall_x_lockstep=round(wall / lock_wall, 3),
                client_cpu_ms_per_episode_turn=round(cpu_ms, 3),
                cpu_x_lockstep=round(cpu_ms / lock_cpu_ms, 3),
                cpu_x_lockstep_rounds=[round(x, 3) for x in per_round],
                episode_turns_cpu=cpu[(mode, g)][1]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="G = 4, delays 5 to 100 ms, two turns, one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--groups", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.quick:
        rows = run((4,), 1, quick=True)
    else:
        rows = run(tuple(args.groups), args.rounds)
    print(format_rows(rows))
    for r in rows:
        print(f"{r['case']}: wall {r['wall_s']} s = {r['ratio']:.2f}x the slowest episode's "
              f"own tool time, {r['wall_x_lockstep']:.2f}x lockstep's; client CPU "
              f"{r['client_cpu_ms_per_episode_turn']} ms per episode-turn "
              f"({r['cpu_x_lockstep']:.2f}x lockstep's; each round: "
              f"{', '.join(f'{x:.2f}x' for x in r['cpu_x_lockstep_rounds'])})")
    for r in rows:
        if "free-running" in r["case"]:
            ok = r["ratio"] <= TARGET
            print(f"target: {r['case']} within {TARGET}x the slowest episode: "
                  f"{r['ratio']:.2f}x ({'met' if ok else 'MISSED'})")
            ok = r["cpu_x_lockstep"] <= CPU_TARGET
            print(f"target: {r['case']} client CPU per episode-turn at most {CPU_TARGET}x "
                  f"lockstep's: {r['cpu_x_lockstep']:.2f}x ({'met' if ok else 'MISSED'})")
    if args.json:
        write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
