"""TRL rollouts per second: ``ors_gym.trl.OrsSpec`` vs TRL's ``OpenRewardSpec``.

One SDK server runs the test environment ``Echo`` environment in its own process
(``python -m ors_gym serve echo --port 0``), with its tools' own latency (no
added delay). A "rollout" is what TRL does per episode, without a model:
an instance from the spec's ``environment_factory`` is reset on a task, runs a
fixed script of tool calls through its tool methods (``echo``, ``echo`` again,
``finish``), then the spec's reward function scores it. Both specs run the same
script against the same server, interleaved round by round (rotating order);
each rollout is timed on its own. Reported: median rollout time per case and
rollouts per second, and the ratio of ``OrsSpec``'s rate to ``OpenRewardSpec``'s
(median over rounds; target at least 2x). Each row also gives the CPU time per
rollout of the client (this process) and of the server process, which show
where a rollout's time goes: both sides are CPU-bound on a small machine, so
the server's share (one request costs it about the same from either client)
bounds the ratio.

Run: ``python -m benchmarks.bench_trl`` (``--quick`` for fewer rounds,
``--json PATH`` to save the rows). Needs the ``trl`` extra and ``openreward``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    Steps,
    flat,
    format_rows,
    interleave,
    row,
    served_process,
    write_json,
)
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

ENV = "echo"
ORS = "OrsSpec (ors_gym.trl)"
TRL = "OpenRewardSpec (trl.experimental)"
TARGET = 2.0
TASKS = 3  # Echo's train split
COMPLETION = [{"role": "assistant", "content": "Done."}]


def script(instance: Any) -> None:
    """The fixed tool calls of one rollout, through the instance's tool methods."""
    instance.echo(text="hello")
    instance.echo(text="again", repeat=2)
    instance.finish(reward=1.0)


def _rollouts(spec: Any) -> Callable[[int], list[float]]:
    """``n`` rollouts on one instance (TRL pools instances and resets them)."""
    instance = spec.environment_factory()
    reward = spec.reward_funcs
    counter = [0]

    def steps(n: int) -> list[float]:
        out = []
        for _ in range(n):
            index = counter[0] % TASKS
            counter[0] += 1
            t = time.perf_counter()
            instance.reset(task_index=index, prompt=[])
            script(instance)
            scores = reward(prompts=[[]], completions=[COMPLETION], environments=[instance])
            out.append(time.perf_counter() - t)
        assert scores == [1.0], scores
        return out

    steps.instance = instance  # type: ignore[attr-defined]  # kept alive with the case
    return steps


@contextmanager
def ors_case(url: str) -> Iterator[Steps]:
    from ors_gym.trl import OrsSpec

    spec = OrsSpec("ors/Remote-v0", base_url=url, env_name=ENV)
    steps = _rollouts(spec)
    try:
        yield steps
    finally:
        steps.instance.env.close()  # type: ignore[attr-defined]


@contextmanager
def trl_case(url: str) -> Iterator[Steps]:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ["OPENREWARD_SESSION_URL"] = url  # the SDK's sessions go to this server too
    from trl.experimental.openreward import OpenRewardSpec

    spec = OpenRewardSpec(url, env_name=ENV)
    steps = _rollouts(spec)
    try:
        yield steps
    finally:
        steps.instance._close()  # type: ignore[attr-defined]


def _process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, where /proc tells."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _metered(steps: Steps, server_pid: int, cpu: dict[str, float]) -> Steps:
    """``steps``, adding its rollouts, client CPU and server CPU seconds to ``cpu``."""

    def run(n: int) -> list[float]:
        client, server = time.process_time(), _process_cpu(server_pid)
        out = steps(n)
        cpu["client"] += time.process_time() - client
        after = _process_cpu(server_pid)
        if server is not None and after is not None:
            cpu["server"] += after - server
        cpu["rollouts"] += n
        return out

    return run


def run(rounds: int = 10, batch_ms: float = 300.0) -> list[dict[str, Any]]:
    """Time both specs; one row per case (rollouts/s, ratio to OpenRewardSpec's rate)."""
    logging.getLogger("trl").setLevel(logging.ERROR)
    cpu: dict[str, dict[str, float]] = {
        name: {"client": 0.0, "server": 0.0, "rollouts": 0} for name in (TRL, ORS)}
    with ExitStack() as stack:
        pid, url = stack.enter_context(served_process([TEST_ENVS["Echo"]]))
        cases: dict[str, Steps] = {
            TRL: _metered(stack.enter_context(trl_case(url)), pid, cpu[TRL]),
            ORS: _metered(stack.enter_context(ors_case(url)), pid, cpu[ORS]),
        }
        times = interleave(cases, rounds, batch_ms / 1000)
    base = statistics.median(flat(times[TRL]))
    rows = []
    for name, per_round in times.items():
        med = statistics.median(flat(per_round))
        # Rate ratio: the baseline's rollout time over ours, median over rounds.
        ratio = statistics.median(
            statistics.median(b) / statistics.median(o)
            for o, b in zip(per_round, times[TRL], strict=True)
        )
        used = cpu[name]
        per = 1000 / max(used["rollouts"], 1)  # ms per rollout (batch sizing included)
        rows.append(row("trl", name, 1 / med, 1 / base, ratio, "rollouts/s", TRL,
                        ms_per_rollout=round(med * 1000, 2), rollouts=len(flat(per_round)),
                        rounds=rounds, client_cpu_ms=round(used["client"] * per, 2),
                        server_cpu_ms=round(used["server"] * per, 2)))
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    by = {r["case"]: r for r in rows}
    ratio = by[ORS]["ratio"]
    return [f"target: OrsSpec >= {TARGET}x OpenRewardSpec's rollouts/s: {ratio:.2f}x "
            f"({'met' if ratio >= TARGET else 'MISSED'})"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = run(rounds=3 if args.quick else 10)
    print(format_rows(rows))
    for r in rows:
        print(f"{r['case']}: {r['ms_per_rollout']} ms per rollout; CPU per rollout: "
              f"client {r['client_cpu_ms']} ms, server {r['server_cpu_ms']} ms")
    for line in verdicts(rows):
        print(line)
    if args.json:
        write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
