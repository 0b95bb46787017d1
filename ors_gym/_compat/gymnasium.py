"""gymnasium: one sub-environment's info added to a vector env's batched infos.

``OrsVectorEnv`` batches infos exactly as gymnasium's own vector envs do,
with ``VectorEnv._add_info``, a private method that reads only
``self.num_envs``: it is called on a stand-in holding the batch size (which
may be smaller than the vector env's). Outside ``VERIFIED`` a copy of
gymnasium 1.4's method, written against numpy alone, answers instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ors_gym._compat._versions import note_fallback, version_of, within

__all__ = ["VERIFIED", "add_info"]

#: gymnasium releases whose VectorEnv._add_info was read and found the same (1.2.0, 1.4.0).
VERIFIED = ((1, 2), (1, 5))


def _private_add_info() -> Any:
    if not within("gymnasium", *VERIFIED):
        return None
    from gymnasium.vector import VectorEnv

    return getattr(VectorEnv, "_add_info", None)


class _Batch:
    """What ``VectorEnv._add_info`` reads of its ``self``: ``num_envs``, and itself."""

    __slots__ = ("num_envs",)
    _add_info: Any = _private_add_info()

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def add_info(
    vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int, num_envs: int
) -> dict[str, Any]:
    """``env_info`` of sub-env ``env_num`` added to ``vector_infos`` for a batch of ``num_envs``.

    Each key gets an array of length ``num_envs`` (typed by the first value met;
    ``final_obs`` always an object array; dicts recursively) and a ``_key``
    boolean mask. Updates and returns ``vector_infos``, as gymnasium does.
    """
    if _Batch._add_info is None:
        note_fallback(
            "gymnasium VectorEnv._add_info",
            f"gymnasium {version_of('gymnasium')} is outside the verified range {VERIFIED} "
            "or has no VectorEnv._add_info; infos are batched by a copy of gymnasium 1.4's",
        )
        return _add_info(vector_infos, env_info, env_num, num_envs)
    return _Batch(num_envs)._add_info(vector_infos, env_info, env_num)


def _add_info(
    vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int, num_envs: int
) -> dict[str, Any]:
    """gymnasium 1.4's ``VectorEnv._add_info``, with ``num_envs`` passed in."""
    for key, value in env_info.items():
        if key == "final_obs":
            if "final_obs" in vector_infos:
                array = vector_infos["final_obs"]
            else:
                array = np.full(num_envs, fill_value=None, dtype=object)
            array[env_num] = value
        elif isinstance(value, dict):
            array = _add_info(vector_infos.get(key, {}), value, env_num, num_envs)
        else:
            if key not in vector_infos:
                if type(value) in (int, float, bool) or issubclass(type(value), np.number):
                    array = np.zeros(num_envs, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((num_envs, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(num_envs, fill_value=None, dtype=object)
            else:
                array = vector_infos[key]
            array[env_num] = value
        mask = vector_infos.get(f"_{key}", np.zeros(num_envs, dtype=np.bool_))
        mask[env_num] = True
        vector_infos[key], vector_infos[f"_{key}"] = array, mask
    return vector_infos
