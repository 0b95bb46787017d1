"""TRL rollouts per second: ``ors_gym.trl.OrsSpec`` vs TRL's ``OpenRewardSpec``.

One SDK server runs the bundled ``Echo`` environment in its own process
(``python -m ors_gym serve echo --port 0``), with its tools' own latency (no
added delay). A "rollout" is what TRL does per episode, without a model:
an instance from the spec's ``environment_factory`` is reset on a task, runs a
fixed script of tool calls through its tool methods (``echo``, ``echo`` again,
``finish``), then the spec's reward function scores it. Both specs run the same
script against the same server, interleaved round by round (rotating order);
each rollout is timed on its own. Reported: median rollout time per case and
rollouts per second, and the ratio of ``OrsSpec``'s rate to ``OpenRewardSpec``'s
(median over rounds; target at least 2x).

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

from benchmarks._common import Steps, flat, format_rows, interleave, row, served, write_json
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


def run(rounds: int = 10, batch_ms: float = 300.0) -> list[dict[str, Any]]:
    """Time both specs; one row per case (rollouts/s, ratio to OpenRewardSpec's rate)."""
    logging.getLogger("trl").setLevel(logging.ERROR)
    with ExitStack() as stack:
        url = stack.enter_context(served([ENV]))
        cases: dict[str, Steps] = {
            TRL: stack.enter_context(trl_case(url)),
            ORS: stack.enter_context(ors_case(url)),
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
        rows.append(row("trl", name, 1 / med, 1 / base, ratio, "rollouts/s", TRL,
                        ms_per_rollout=round(med * 1000, 2), rollouts=len(flat(per_round)),
                        rounds=rounds))
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
    for line in verdicts(rows):
        print(line)
    if args.json:
        write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
