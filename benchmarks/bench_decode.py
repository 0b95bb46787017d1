"""Observation decoding vs pillow's own decode, measured in the same run.

For each case an image is encoded as a base64 ORS image block, then
``ors_gym.observations.decode_blocks([block])`` is timed against the floor
``np.asarray(Image.open(BytesIO(b64decode(data))).convert("RGB"))`` (plus the
same BILINEAR resize for the resize case). Repeats alternate which side runs
first; the ratio is the median of the per-round ratios (adjacent batches, so
load from other processes cancels out). The target is a ratio <= 1.1.

Run: ``python -m benchmarks.bench_decode`` (``--quick`` for fewer repeats,
``--json PATH`` to save the rows).
"""

from __future__ import annotations

import argparse
import base64
import gc
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

if __package__ in (None, ""):  # run as a file: make `ors_gym` importable from the repo
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ors_gym.observations import decode_blocks
from ors_gym.protocol import ImageBlock

_TARGET_SECONDS_PER_BATCH = 0.01


def _pixels(side: int, channels: int, seed: int) -> np.ndarray:
    """Gradients plus a little noise: photo-like, compresses a few times over."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / side
    planes = [x, y, (x + y) / 2, 1 - x * y][:channels]
    base = np.stack(planes, axis=-1) * 230
    noise = rng.integers(0, 12, size=(side, side, channels))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def _encode(array: np.ndarray, fmt: str) -> str:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _cases() -> list[dict[str, Any]]:
    """name, base64 data, mime, image_size (None = native size)."""
    cases: list[dict[str, Any]] = [
        {"case": f"png {s}x{s}", "data": _encode(_pixels(s, 3, s), "PNG"), "mime": "image/png"}
        for s in (64, 256, 1024)
    ]
    cases.append(
        {"case": "png rgba 256x256", "data": _encode(_pixels(256, 4, 7), "PNG"),
         "mime": "image/png"}
    )
    jpeg = _encode(_pixels(1024, 3, 9), "JPEG")
    cases.append({"case": "jpeg 1024x1024", "data": jpeg, "mime": "image/jpeg"})
    cases.append(
        {"case": "jpeg 1024 -> 84x84", "data": jpeg, "mime": "image/jpeg", "size": (84, 84)}
    )
    return cases


def _ours(case: dict[str, Any]) -> Callable[[], object]:
    blocks = [ImageBlock(data=case["data"], mimeType=case["mime"])]
    size = case.get("size")

    def run() -> object:
        return decode_blocks(blocks, image_size=size)

    return run


def _floor(case: dict[str, Any]) -> Callable[[], object]:
    data = case["data"]
    size = case.get("size")

    def run() -> object:
        im = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
        if size is not None:
            im = im.resize((size[1], size[0]), Image.Resampling.BILINEAR)
        return np.asarray(im)

    return run


def _batch_seconds(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def _measure(
    ours: Callable[[], object], floor: Callable[[], object], repeats: int
) -> tuple[float, float, float]:
    """Median seconds per call of each side, and the median of the paired per-round ratios."""
    ours(), floor()  # warm up (plugin imports, caches)
    once = max(_batch_seconds(floor, 1), 1e-6)
    number = max(1, int(_TARGET_SECONDS_PER_BATCH / once))
    ours_t: list[float] = []
    floor_t: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(repeats):
            if i % 2:
                ours_t.append(_batch_seconds(ours, number))
                floor_t.append(_batch_seconds(floor, number))
            else:
                floor_t.append(_batch_seconds(floor, number))
                ours_t.append(_batch_seconds(ours, number))
    finally:
        if gc_was_enabled:
            gc.enable()
    ratios = [o / f for o, f in zip(ours_t, floor_t, strict=True)]
    return statistics.median(ours_t), statistics.median(floor_t), statistics.median(ratios)


def run(repeats: int = 31) -> list[dict[str, Any]]:
    """Time every case; rows of ``case, ors_gym_us, pillow_us, ratio``."""
    rows = []
    for case in _cases():
        ours, floor, ratio = _measure(_ours(case), _floor(case), repeats)
        rows.append(
            {
                "benchmark": "decode",
                "case": case["case"],
                "ors_gym_us": round(ours * 1e6, 1),
                "pillow_us": round(floor * 1e6, 1),
                "ratio": round(ratio, 3),
            }
        )
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table."""
    lines = [f"{'case':<22} {'ors_gym us':>12} {'pillow us':>12} {'ratio':>7}"]
    for r in rows:
        lines.append(
            f"{r['case']:<22} {r['ors_gym_us']:>12.1f} {r['pillow_us']:>12.1f} {r['ratio']:>7.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="7 repeats instead of 31")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    rows = run(repeats=7 if args.quick else 31)
    print(format_table(rows))
    print("ratio = ors_gym decode_blocks / (b64decode + Image.open + convert('RGB') + asarray);"
          " ors_gym also composites alpha on white and returns writeable arrays")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
