"""What sub-envs produced, batched: observations, rewards and flags, and infos with masks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import concatenate, create_empty_array

from ors_gym._compat.gymnasium import add_info
from ors_gym.errors import OrsConnectionError, OrsError
from ors_gym.protocol import ListToolsOutput

__all__ = [
    "Outcome",
    "batch_infos",
    "batch_outcomes",
    "raise_first",
    "stack_observations",
    "tile_frames",
]


def batch_infos(infos: Sequence[tuple[int, dict[str, Any]]], n: int) -> dict[str, Any]:
    """``(position, info)`` pairs batched into arrays of length ``n`` with ``_key`` masks,
    as gymnasium's vector envs batch them.

    Gymnasium types a key's array by the first value it meets, so ``index`` 2 in
    one sub-env and None in the next (a reset by ``task_spec``) would fail; keys
    whose values differ in type get an object array instead.
    """
    out = _mixed_keys([info for _, info in infos], n) if len(infos) > 1 else {}
    for position, info in infos:
        out = add_info(out, info, position, n)
    return out


def _mixed_keys(infos: Sequence[Mapping[str, Any]], n: int) -> dict[str, Any]:
    """Object arrays (and empty masks) for the keys whose values differ in type."""
    out: dict[str, Any] = {}
    kinds: dict[str, set[type]] = {}
    for info in infos:
        for key, value in info.items():
            kinds.setdefault(key, set()).add(type(value))
    for key, types in kinds.items():
        if key == "final_obs":  # gymnasium keeps these as an object array already
            continue
        if dict in types and len(types) == 1:
            nested = _mixed_keys([i[key] for i in infos if isinstance(i.get(key), dict)], n)
            if nested:
                out[key] = nested
        elif len(types) > 1:
            out[key] = np.full(n, None, dtype=object)
            out[f"_{key}"] = np.zeros(n, dtype=np.bool_)
    return out


@dataclass
class Outcome:
    """What one sub-env's step (or autoreset) produced."""

    index: int
    obs: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    tools: ListToolsOutput | None = None  # set when the sub-env opened a new session
    failure: OrsError | None = None


def stack_observations(space: Any, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sub-env observations batched as gymnasium batches ``space``.

    An ``OrsEnv`` observation space batches every entry as a tuple of the sub-envs'
    values (text, and unstacked image sequences): that is built directly, without
    gymnasium's per-call dispatch; any other space goes through gymnasium.
    """
    if _batches_as_tuples(space):
        return {key: tuple(item[key] for item in items) for key in space.spaces}
    out: Any = create_empty_array(space, n=len(items), fn=np.zeros)
    return cast(dict[str, Any], concatenate(space, items, out))


def _batches_as_tuples(space: Any) -> bool:
    """Whether gymnasium batches every entry of the Dict ``space`` as a tuple."""
    return isinstance(space, spaces.Dict) and all(
        isinstance(sub, spaces.Text)
        or (isinstance(sub, spaces.Sequence) and not sub.stack)
        for sub in space.spaces.values()
    )


def batch_outcomes(
    space: Any, outcomes: Sequence[Outcome]
) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
    """Observations, rewards, terminations and truncations of ``outcomes``, in their order."""
    return (
        stack_observations(space, [o.obs for o in outcomes]),
        np.array([o.reward for o in outcomes], dtype=np.float64),
        np.array([o.terminated for o in outcomes], dtype=np.bool_),
        np.array([o.truncated for o in outcomes], dtype=np.bool_),
    )


def raise_first(errors: Sequence[BaseException]) -> None:
    """Raise the most telling of ``errors``, if any: a dead server before anything else."""
    if errors:
        raise sorted(errors, key=lambda e: not isinstance(e, OrsConnectionError))[0]


def tile_frames(frames: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """RGB frames tiled row by row in a near-square grid; black where a frame is missing.

    Frames of different sizes are placed top-left in cells of the largest size.
    None when no sub-env has a frame.
    """
    shown = [f for f in frames if f is not None]
    if not shown:
        return None
    height = max(f.shape[0] for f in shown)
    width = max(f.shape[1] for f in shown)
    cols = int(np.ceil(np.sqrt(len(frames))))
    rows = int(np.ceil(len(frames) / cols))
    out = np.zeros((rows * height, cols * width, 3), dtype=np.uint8)
    for i, frame in enumerate(frames):
        if frame is not None:
            top, left = (i // cols) * height, (i % cols) * width
            out[top:top + frame.shape[0], left:left + frame.shape[1]] = frame[..., :3]
    return out
