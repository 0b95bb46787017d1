"""Batching per-sub-env infos into arrays with ``_key`` masks, as gymnasium does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ors_gym._compat.gymnasium import add_info

__all__ = ["batch_infos"]


def batch_infos(infos: Sequence[tuple[int, dict[str, Any]]], n: int) -> dict[str, Any]:
    """``(position, info)`` pairs batched into arrays of length ``n`` with ``_key`` masks,
    as gymnasium's vector envs batch them.

    Gymnasium types a key's array by the first value it meets, so ``index`` 2 in
    one sub-env and None in the next (a reset by ``task_spec``) would fail; keys
    whose values differ in type get an object array instead.
    """
    out = _mixed_keys([info for _, info in infos], n)
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
