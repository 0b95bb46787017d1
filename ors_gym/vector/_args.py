"""Checking what ``OrsVectorEnv``'s callers pass: actions, env ids, reset options, URLs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

__all__ = [
    "autoreset_mode_of",
    "env_ids_of",
    "reset_targets",
    "seeds_for",
    "server_urls",
    "split_actions",
]


def env_ids_of(env_ids: Sequence[int] | np.ndarray | None, num_envs: int) -> list[int]:
    """The sub-envs ``send`` names (default: all), checked."""
    if env_ids is None:
        return list(range(num_envs))
    ids = [int(i) for i in np.asarray(env_ids).reshape(-1)]
    bad = [i for i in ids if not 0 <= i < num_envs]
    if bad:
        raise ValueError(f"env_ids {bad} out of range: sub-envs are 0..{num_envs - 1}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"env_ids {ids} name a sub-env twice")
    return ids


def reset_targets(
    options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None, n: int
) -> tuple[list[int], list[Mapping[str, Any] | None]]:
    """The sub-envs a ``reset`` opens and each one's options (one dict, a list, a mask)."""
    if options is None or isinstance(options, Mapping):
        shared = dict(options or {})
        mask = shared.pop("reset_mask", None)
        ids = list(range(n))
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != (n,) or mask.dtype != np.bool_:
                raise ValueError(
                    f"options['reset_mask'] must be a bool array of shape ({n},), "
                    f"got {mask.dtype} {mask.shape}"
                )
            if not mask.any():
                raise ValueError("options['reset_mask'] selects no sub-env")
            ids = [int(i) for i in np.flatnonzero(mask)]
        return ids, [shared] * n
    if isinstance(options, str | bytes) or not isinstance(options, Sequence):
        raise TypeError(
            "reset options must be a dict (for every sub-env) or a list of num_envs "
            f"dicts (one each), got {type(options).__name__}"
        )
    per_env = list(options)
    if len(per_env) != n:
        raise ValueError(
            f"reset(options=[...]) needs {n} entries (num_envs), got {len(per_env)}"
        )
    return list(range(n)), per_env


def split_actions(actions: Any, n: int) -> list[Any]:
    """``actions`` as a list of ``n`` per-sub-env actions, or a clear error."""
    if isinstance(actions, str | bytes | Mapping) or not isinstance(
        actions, Sequence | np.ndarray
    ):
        raise TypeError(
            f"actions must be a sequence of {n} actions, one per sub-env (e.g. a tuple of "
            f"str or dicts), got {type(actions).__name__}"
        )
    batch = list(actions)
    if len(batch) != n:
        raise ValueError(f"expected {n} actions (one per sub-env), got {len(batch)}")
    return batch


def autoreset_mode_of(mode: AutoresetMode | str) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    for candidate in AutoresetMode:
        if mode in (candidate.value, candidate.name, candidate.name.lower()):
            return candidate
    raise ValueError(
        f"autoreset_mode={mode!r}; choose one of gymnasium's AutoresetMode: "
        + ", ".join(f"{m.value!r}" for m in AutoresetMode)
    )


def server_urls(base_url: str | Sequence[str] | None) -> list[str] | None:
    if base_url is None:
        return None
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    if not urls or not all(isinstance(u, str) for u in urls):
        raise ValueError(
            "base_url must be a server URL or a non-empty list of them, e.g. "
            f"['http://127.0.0.1:8080', 'http://127.0.0.1:8081']; got {base_url!r}"
        )
    return urls


def seeds_for(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Per-env seeds: an int seeds env ``i`` with ``seed + i``; a list gives one each."""
    if seed is None:
        return [None] * n
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in range(n)]
    seeds = list(seed)
    if len(seeds) != n:
        raise ValueError(f"reset(seed=[...]) needs {n} seeds (num_envs), got {len(seeds)}")
    return seeds
