"""Latency: one tool that only waits, for throughput benchmarks.

``wait()`` sleeps ``task_spec["delay_ms"]`` milliseconds (default 20) without
blocking the server's event loop and returns reward 0; the call numbered
``task_spec["length"]`` (default 1,000,000) ends the episode. The time per step
is therefore known, so a benchmark measures client overhead and concurrency.
``task_spec["delays_ms"]``, a list, gives each call its own delay instead (in
order, then again from the start), for latencies that vary from call to call.
``task_spec["reward_parts"]``, if given, is returned as each call's
``metadata["reward_parts"]`` exactly as given (well-formed or not), to test how
clients carry named reward parts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from openreward.environments import (
    JSONObject,
    TextBlock,
    ToolOutput,
    tool,
)

from ors_gym.envs._common import BundledEnvironment, text_output

__all__ = ["Latency"]

_DEFAULT_DELAY_MS = 20
_DEFAULT_LENGTH = 1_000_000


class Latency(BundledEnvironment):
    """Each ``wait`` call takes ``delay_ms``; the episode ends after ``length`` calls."""

    split_names = ("train",)

    def _read_task(self, task_spec: JSONObject) -> None:
        delay_ms = task_spec.get("delay_ms", _DEFAULT_DELAY_MS)
        length = task_spec.get("length", _DEFAULT_LENGTH)
        if not isinstance(delay_ms, int | float) or not 0 <= delay_ms <= 60_000:
            raise ValueError(
                f"Latency 'delay_ms' must be a number from 0 to 60000, got {delay_ms!r}"
            )
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"Latency 'length' must be a positive integer, got {length!r}")
        self.delay_s = float(delay_ms) / 1000
        delays = task_spec.get("delays_ms")
        if delays is not None and (
            not isinstance(delays, list) or not delays
            or not all(isinstance(d, int | float) and 0 <= d <= 60_000 for d in delays)
        ):
            raise ValueError(
                f"Latency 'delays_ms' must be a non-empty list of numbers from 0 to 60000, "
                f"got {delays!r}"
            )
        self.delays_s = [float(d) / 1000 for d in delays] if delays else [self.delay_s]
        self.length = length
        self.reward_parts = task_spec.get("reward_parts")
        self.steps = 0

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        return [{"id": f"train-{i}", "delay_ms": _DEFAULT_DELAY_MS} for i in range(4)]

    async def get_prompt(self) -> list[TextBlock]:
        return [
            TextBlock(text=f"Call wait repeatedly; each call takes {self.delay_s * 1000:g} ms.")
        ]

    @tool
    async def wait(self) -> ToolOutput:
        """Sleep for the task's delay_ms, then return (reward 0; ends after `length` calls)."""
        await asyncio.sleep(self.delays_s[self.steps % len(self.delays_s)])
        self.steps += 1
        done = self.steps >= self.length
        metadata: JSONObject = {"steps": self.steps}
        if self.reward_parts is not None:
            metadata["reward_parts"] = self.reward_parts
        return text_output(f"waited {self.steps}", finished=done, metadata=metadata)
