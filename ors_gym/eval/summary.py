"""The figures of an evaluation run, from its episode records, and their text table.

An episode succeeds when the environment finished it (``terminated``) with a
positive final reward. Its errors are counted by reason: the episode's
``error`` (``endpoint_http_500``, ``endpoint_connection``... for the model's
endpoint, ``env_<ErrorClass>`` for the environment's), its truncation
reason (``max_steps``, ``server_error``...) and every agent mistake its steps
report (``unknown_tool``, ``invalid_input``, ``no_tool_call``...).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["episode_errors", "format_summary", "mean_interval", "summarize"]

#: Two-sided 97.5% Student t quantiles for 1..30 degrees of freedom (then 1.96).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean with a 95% Student t interval (zero width for n < 2)."""
    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = sum(values) / n
    if n < 2:
        return (mean, mean, mean)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    half = t * sd / math.sqrt(n)
    return (mean, mean - half, mean + half)


def episode_errors(record: Mapping[str, Any]) -> list[str]:
    """The error reasons of one episode record (see the module docstring)."""
    reasons: list[str] = []
    error = record.get("error")
    if isinstance(error, Mapping):
        reasons.append(str(error.get("reason")))
    for step in record.get("steps") or ():
        if step.get("error_reason"):
            reasons.append(str(step["error_reason"]))
        if step.get("truncation_reason"):
            reasons.append(str(step["truncation_reason"]))
    return reasons


def summarize(records: Sequence[Mapping[str, Any]], **about: Any) -> dict[str, Any]:
    """The run's figures (``summary.json``); ``about`` (model, env id, timings) is kept as is."""
    rewards = [float(r.get("total_reward", 0.0)) for r in records]
    mean, low, high = mean_interval(rewards)
    successes = sum(
        1 for r in records
        if r.get("terminated") and r.get("steps") and float(r["steps"][-1]["reward"]) > 0
    )
    errors = Counter(reason for r in records for reason in episode_errors(r))
    usage: dict[str, int] = {}
    for r in records:
        for key, value in (r.get("usage") or {}).items():
            usage[key] = usage.get(key, 0) + int(value)
    n = len(records)
    return {
        **about,
        "episodes": n,
        "mean_reward": mean,
        "reward_ci95": [low, high],
        "success_rate": successes / n if n else math.nan,
        "mean_turns": sum(int(r.get("length", 0)) for r in records) / n if n else math.nan,
        "errored_episodes": sum(1 for r in records if r.get("error")),
        "errors": dict(sorted(errors.items())),
        "usage": usage or None,
    }


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary as an aligned two-column text table."""
    low, high = summary["reward_ci95"]
    rows = [
        ("model", str(summary.get("model", "?"))),
        ("environment", f"{summary.get('env_id', '?')} ({summary.get('split') or '?'} split)"),
        ("episodes", f"{summary['episodes']} ({summary['errored_episodes']} cut short by errors)"),
        ("mean reward", f"{summary['mean_reward']:.3f}  (95% CI {low:.3f} .. {high:.3f})"),
        ("success rate", f"{summary['success_rate']:.1%}"),
        ("mean turns", f"{summary['mean_turns']:.2f}"),
    ]
    errors = summary.get("errors") or {}
    rows.append(("errors", ", ".join(f"{k}: {v}" for k, v in errors.items()) or "none"))
    if summary.get("usage"):
        rows.append(("tokens", ", ".join(f"{k} {v}" for k, v in summary["usage"].items())))
    if "wall_seconds" in summary:
        rows.append(("wall time", f"{summary['wall_seconds']:.2f} s "
                                  f"(concurrency {summary.get('concurrency', '?')})"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
