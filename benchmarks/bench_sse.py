"""SSE answers read by httpx-sse vs the hand-written parser it replaced.

ors_gym reads a tool call's SSE answer with httpx-sse (``StreamAssembler.read``:
its ``EventSource`` over the stream's guarded bytes). The parser it replaced is
kept below, driven as its driver did (each piece decoded, parsed, its events
fed to the same ``StreamAssembler``), as the baseline of both parts, measured
in the same run and interleaved round by round:

- ``line``: one answer whose ``end`` event carries one data line of 100 B (a
  usual result), 1 kB, 100 kB, 1 MB and 4 MB, arriving in 64 KiB pieces (the
  most one socket read gives; smaller pieces cost the old parser more). Per
  answer: the median time to read it, each way, on one event loop. ``x old`` is
  new / old (below 1: httpx-sse is faster); ``x prev`` is how each way's time
  grew from the size above, next to how much the line grew (``x line``): time
  linear in line length grows as the line, the old parser's grew as its square.
- ``step``: whole ``OrsEnv.step`` calls over HTTP (the test environment ``Echo``,
  ``echo(text="hello")``, its SDK server in its own process), with each reader
  (the old one patched in for its batches): client CPU per step (this process's
  CPU time over its steps; the server runs elsewhere) and the median step.

Run: ``python -m benchmarks.bench_sse`` (``--quick`` for fewer rounds, ``--json PATH``
to save the rows).
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import json
import statistics
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from benchmarks._common import (
    Steps,
    cpu_counted,
    flat,
    interleave,
    round_ratio,
    row,
    served,
    write_json,
)
from benchmarks.bench_http import orsenv_case
from ors_gym.backends.http._codec import BodyDecoder
from ors_gym.backends.http._settings import Where
from ors_gym.backends.http._sse import StreamAssembler
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

LINE_SIZES = (100, 1_000, 100_000, 1_000_000, 4_000_000)
PIECE = 64 * 1024
NEW = "httpx-sse"
OLD = "old parser"
_WHERE = Where(server="http://bench.test")
_ACK = b"event: task_id\r\ndata: 0123abcd\r\n\r\n"


# -- the baseline: the parser httpx-sse replaced, and how its driver fed it ---------------


class OldParser:
    """The replaced parser, as it was: it joins its partial line to every piece read."""

    __slots__ = ("_after_cr", "_data", "_event", "_partial", "_text")

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""
        self._after_cr = False
        self._event = ""
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        text = self._text.decode(data)
        if self._after_cr and text[:1] == "\n":
            text = text[1:]
        self._after_cr = text[-1:] == "\r"
        lines = (self._partial + text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            if not line:
                if self._event or self._data:
                    events.append((self._event or "message", "\n".join(self._data)))
                    self._event, self._data = "", []
                continue
            if line[0] == ":":
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
        return events


async def old_read(sink: StreamAssembler, pieces: AsyncIterable[bytes],
                   content_encoding: str = "") -> None:
    """What the driver did with a 200 answer before httpx-sse: each piece decoded and
    parsed, its events fed, the deadline checked, then at most 64 KiB more read."""
    decoder = BodyDecoder(content_encoding, max_bytes=sink.max_bytes, what=sink.what,
                          where=sink.where)
    parser, check = OldParser(), sink._deadline
    stream = pieces.__aiter__()
    async for raw in stream:
        if any(sink.feed(event, data) for event, data in parser.feed(decoder.feed(raw))):
            left = 64 * 1024
            try:
                async for rest in stream:
                    left -= len(rest)
                    if left < 0:
                        return
            except httpx.HTTPError:
                pass
            return
        if check is not None:
            check()


async def _old_method(self: StreamAssembler, pieces: AsyncIterable[bytes],
                      content_encoding: str = "") -> None:
    await old_read(self, pieces, content_encoding)


# -- line length ------------------------------------------------------------------------


def answer(size: int) -> list[bytes]:
    """A whole answer whose ``end`` data is one JSON string ``size`` bytes long, in pieces."""
    line = json.dumps("x" * (size - 2)).encode()
    wire = _ACK + b"event: end\r\ndata: " + line + b"\r\n\r\n"
    return [wire[i:i + PIECE] for i in range(0, len(wire), PIECE)]


async def _arriving(pieces: Sequence[bytes]) -> AsyncIterator[bytes]:
    for raw in pieces:
        yield raw


def _reader(loop: asyncio.AbstractEventLoop, pieces: Sequence[bytes],
            read: Callable[..., Any]) -> Steps:
    """Reads of the whole answer ``pieces`` on ``loop`` by ``read(sink, pieces)``."""
    def steps(n: int) -> list[float]:
        out = []
        for _ in range(n):
            sink = StreamAssembler(max_bytes=10**8, what="bench", where=_WHERE)
            t = time.perf_counter()
            loop.run_until_complete(read(sink, _arriving(pieces)))
            out.append(time.perf_counter() - t)
        assert sink.done and sink.task_id == "0123abcd"
        return out

    return steps


def run_lines(rounds: int, batch_ms: float, sizes: Sequence[int] = LINE_SIZES
              ) -> list[dict[str, Any]]:
    """One row per line size: httpx-sse's time per answer against the old parser's."""
    loop = asyncio.new_event_loop()
    try:
        for size in sizes:  # both ways read the same result
            results = []
            for read in (StreamAssembler.read, old_read):
                sink = StreamAssembler(max_bytes=10**8, what="bench", where=_WHERE)
                loop.run_until_complete(read(sink, _arriving(answer(size))))
                results.append(sink.result())
            assert results[0] == results[1] == "x" * (size - 2)
        cases: dict[tuple[str, int], Steps] = {}
        for size in sizes:
            pieces = answer(size)
            cases[NEW, size] = _reader(loop, pieces, StreamAssembler.read)
            cases[OLD, size] = _reader(loop, pieces, old_read)
        times = interleave({f"{way} {size}": fn for (way, size), fn in cases.items()},
                           rounds, batch_ms / 1000, minimum=2)
    finally:
        loop.close()
    rows = []
    previous: int | None = None
    for size in sizes:
        new, old = times[f"{NEW} {size}"], times[f"{OLD} {size}"]
        new_med, old_med = statistics.median(flat(new)), statistics.median(flat(old))
        extra: dict[str, Any] = {
            "line_bytes": size, "pieces": len(answer(size)), "rounds": rounds,
            "ns_per_byte_new": round(new_med * 1e9 / size, 2),
            "ns_per_byte_old": round(old_med * 1e9 / size, 2),
        }
        if previous is not None:
            extra["x_line"] = round(size / previous, 1)
            extra["x_prev_new"] = round(
                new_med / statistics.median(flat(times[f"{NEW} {previous}"])), 2)
            extra["x_prev_old"] = round(
                old_med / statistics.median(flat(times[f"{OLD} {previous}"])), 2)
        rows.append(row("sse", f"{_size(size)} data line", new_med * 1e6, old_med * 1e6,
                        round_ratio(new, old), "us/answer", OLD, **extra))
        previous = size
    return rows


def _size(n: int) -> str:
    for unit, scale in (("MB", 1_000_000), ("kB", 1_000)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


# -- per step over HTTP -----------------------------------------------------------------


def _with_old_reader(steps: Steps) -> Steps:
    """``steps`` with the old reader in place of ``StreamAssembler.read`` while they run."""
    def patched(n: int) -> list[float]:
        real = StreamAssembler.read
        StreamAssembler.read = _old_method  # type: ignore[method-assign]
        try:
            return steps(n)
        finally:
            StreamAssembler.read = real  # type: ignore[method-assign]

    return patched



def run_steps(rounds: int, batch_ms: float) -> list[dict[str, Any]]:
    """``OrsEnv.step`` over HTTP with each reader: client CPU and median wall per step."""
    with ExitStack() as stack:
        url = stack.enter_context(served([TEST_ENVS["Echo"]]))
        new = stack.enter_context(orsenv_case(url))
        old = _with_old_reader(stack.enter_context(orsenv_case(url)))
        cpu = {NEW: [0.0, 0.0], OLD: [0.0, 0.0]}
        times = interleave({NEW: cpu_counted(new, cpu[NEW]), OLD: cpu_counted(old, cpu[OLD])},
                           rounds, batch_ms / 1000)
    per_step = {way: 1e6 * total / count for way, (total, count) in cpu.items()}
    wall = {way: statistics.median(flat(times[way])) * 1e6 for way in (NEW, OLD)}
    return [
        row("sse", "OrsEnv.step (HTTP) client CPU", per_step[NEW], per_step[OLD],
            per_step[NEW] / per_step[OLD], "us CPU", OLD, steps=int(cpu[NEW][1]),
            rounds=rounds),
        row("sse", "OrsEnv.step (HTTP) wall", wall[NEW], wall[OLD],
            round_ratio(times[NEW], times[OLD]), "us/step", OLD, rounds=rounds),
    ]


def run(rounds: int = 9, batch_ms: float = 200.0, sizes: Sequence[int] = LINE_SIZES,
        steps: bool = True) -> list[dict[str, Any]]:
    """Both parts' rows (``steps=False``: the line sizes alone)."""
    rows = run_lines(rounds, batch_ms, sizes)
    if steps:
        rows += run_steps(rounds, batch_ms)
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """The figures of each case, httpx-sse's beside the old parser's, and their ratio."""
    columns = (("ns_per_byte_new", "ns/B new"), ("ns_per_byte_old", "ns/B old"),
               ("x_line", "x line"), ("x_prev_new", "x prev new"), ("x_prev_old", "x prev old"))
    head = (f"{'case':<30} {NEW:>10} {OLD:>10} {'x old':>6} {'unit':<9}"
            + "".join(f" {title:>10}" for _, title in columns))
    lines = [head, "-" * len(head)]
    for r in rows:
        growth = "".join(f" {r[key]:>10}" if key in r else f" {'-':>10}" for key, _ in columns)
        lines.append(f"{r['case']:<30} {r['ors_gym']:>10.1f} {r['baseline']:>10.1f} "
                     f"{r['ratio']:>6.3f} {r['unit']:<9}{growth}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 9")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    rows = run(rounds=3 if args.quick else 9)
    print(format_table(rows))
    print(f"pieces of {PIECE} bytes; x old below 1: httpx-sse is cheaper; steps: Echo.echo "
          "over HTTP, server in its own process on 127.0.0.1")
    if args.json:
        write_json(rows, args.json)


if __name__ == "__main__":
    main()
