"""The figures of an evaluation run, from its episode records, and their text table.

An episode succeeds when the environment finished it (``terminated``) with a
positive final reward. Its errors are counted by reason: the episode's
``error`` (``endpoint_http_500``, ``endpoint_connection``... for the model's
endpoint, ``env_<ErrorClass>`` for the environment's), its truncation
reason (``max_steps``, ``server_error``...) and every agent mistake its steps
report (``unknown_tool``, ``invalid_input``, ``no_tool_call``...).

An episode cut short outside the model (its endpoint or the environment's server
failed: an ``endpoint_...`` or ``env_...`` error) says nothing about the model, so it
is counted apart (``failed_episodes``) and left out of the score: the mean reward,
its interval, the success rate and the mean turns are over the ``scored_episodes``.
The interval is a bootstrap percentile interval, so it stays within the rewards seen.
With no episode scored these figures are ``None`` (``null`` in ``summary.json``, which is
strict JSON: no ``NaN``), and the table and the report page show ``n/a``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "OUTSIDE_THE_MODEL",
    "episode_errors",
    "failed_outside_the_model",
    "format_figures",
    "format_summary",
    "mean_interval",
    "summarize",
]

#: Error-reason prefixes of failures outside the model: its endpoint, the environment.
OUTSIDE_THE_MODEL = ("endpoint_", "env_")
_RESAMPLES = 2000


def mean_interval(
    values: Sequence[float], *, resamples: int = _RESAMPLES, seed: int = 0
) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean with a 95% bootstrap percentile interval.

    The interval's ends are means of resamples of ``values``, so they never leave
    ``[min(values), max(values)]``; ``seed`` makes it the same on every run. Zero
    width for fewer than two values, NaN for none.
    """
    import numpy as np

    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if n < 2:
        return (mean, mean, mean)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return (mean, float(low), float(high))


def failed_outside_the_model(record: Mapping[str, Any]) -> bool:
    """Whether the episode was cut short by its endpoint or environment, not by the model."""
    error = record.get("error")
    return isinstance(error, Mapping) and str(error.get("reason", "")).startswith(
        OUTSIDE_THE_MODEL
    )


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
    """The run's figures (``summary.json``); ``about`` (model, env id, timings) is kept as is.

    Episodes that failed outside the model are counted in ``failed_episodes`` and
    ``errors`` but not scored (see the module docstring).
    """
    scored = [r for r in records if not failed_outside_the_model(r)]
    rewards = [float(r.get("total_reward", 0.0)) for r in scored]
    mean, low, high = mean_interval(rewards)
    successes = sum(
        1 for r in scored
        if r.get("terminated") and r.get("steps") and float(r["steps"][-1]["reward"]) > 0
    )
    errors = Counter(reason for r in records for reason in episode_errors(r))
    usage: dict[str, int] = {}
    for r in records:
        for key, value in (r.get("usage") or {}).items():
            usage[key] = usage.get(key, 0) + int(value)
    n = len(scored)
    return {
        **about,
        "episodes": len(records),
        "scored_episodes": n,
        "failed_episodes": len(records) - n,
        "mean_reward": mean if n else None,
        "reward_ci95": [low, high] if n else None,
        "success_rate": successes / n if n else None,
        "mean_turns": sum(int(r.get("length", 0)) for r in scored) / n if n else None,
        "errored_episodes": sum(1 for r in records if r.get("error")),
        "errors": dict(sorted(errors.items())),
        "usage": usage or None,
    }


def format_figures(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``mean reward``, ``success rate`` and ``mean turns`` as text: ``n/a (no episode
    scored)`` when nothing was scored (their values are ``None``)."""
    names = ("mean reward", "success rate", "mean turns")
    if summary.get("mean_reward") is None or not summary.get("scored_episodes", 1):
        return [(name, "n/a (no episode scored)") for name in names]
    low, high = summary["reward_ci95"]
    return list(zip(names, (
        f"{summary['mean_reward']:.3f}  (95% CI {low:.3f} .. {high:.3f})",
        f"{summary['success_rate']:.1%}",
        f"{summary['mean_turns']:.2f}",
    ), strict=True))


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary as an aligned two-column text table."""
    rows = [
        ("model", str(summary.get("model", "?"))),
        ("environment", f"{summary.get('env_id', '?')} ({summary.get('split') or '?'} split)"),
        ("episodes", f"{summary['episodes']} ({summary['errored_episodes']} cut short by errors; "
                     f"{summary.get('failed_episodes', 0)} failed outside the model, not "
                     "scored)"),
        *format_figures(summary),
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
