"""Named reward parts: what an environment says its reward is made of.

ORS has one scalar reward per tool call and free metadata. An environment that
scores several things (correctness, format, length...) returns them by name in
``ToolOutput.metadata["reward_parts"]``: a mapping of part name to number, for
that call. Step infos carry each call's metadata (``info["calls"][i]["metadata"]``);
this module reads the parts back out of them, summed per name, for the token
record (``Trajectory.reward_parts``) and the trainer bridges. A value that is not
such a mapping is logged once at WARNING and ignored: the episode goes on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["KEY", "add_parts", "call_parts", "step_parts"]

logger = logging.getLogger("ors_gym")

#: The ``ToolOutput.metadata`` key holding a call's reward parts.
KEY = "reward_parts"

#: The kinds of bad value already logged (each is logged once per process).
_WARNED: set[str] = set()


def call_parts(metadata: Any) -> dict[str, float]:
    """The reward parts in one call's metadata (empty when it has none or they are bad)."""
    if not isinstance(metadata, Mapping) or metadata.get(KEY) is None:
        return {}
    parts = metadata[KEY]
    if not isinstance(parts, Mapping):
        _warn(f"type:{type(parts).__name__}",
              f"a tool's metadata[{KEY!r}] is a {type(parts).__name__}, not a mapping of part "
              "names to numbers: ignored")
        return {}
    out: dict[str, float] = {}
    for name, value in parts.items():
        if (not isinstance(name, str) or isinstance(value, bool)
                or not isinstance(value, int | float) or not math.isfinite(value)):
            _warn(f"part:{name!r}",
                  f"a tool's metadata[{KEY!r}][{name!r}] = {value!r} is not a finite number "
                  "under a string name: that part is ignored")
            continue
        out[name] = float(value)
    return out


def step_parts(info: Mapping[str, Any]) -> dict[str, float]:
    """The reward parts of one step: its calls' parts (``info["calls"]``), summed per name."""
    total: dict[str, float] = {}
    for call in info.get("calls") or ():
        if isinstance(call, Mapping):
            add_parts(total, call_parts(call.get("metadata")))
    return total


def add_parts(total: dict[str, float], parts: Mapping[str, float]) -> None:
    """Add ``parts`` into ``total``, per name."""
    for name, value in parts.items():
        total[name] = total.get(name, 0.0) + value


def _warn(kind: str, message: str) -> None:
    if kind not in _WARNED:
        _WARNED.add(kind)
        logger.warning(message)
