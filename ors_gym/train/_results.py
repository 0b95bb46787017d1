"""What :mod:`ors_gym.train` reports of a run: ``results.json``, the text table, the figure.

``results.json`` holds the run's figures, its learning curve as labelled
columns and notes saying what each part means; ``learning_curve.png`` plots
the training returns against the three evaluated policies; with
``tensorboard=``, the evaluations also go to SB3's TensorBoard logger.
``format_table`` is public through :mod:`ors_gym.train`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "RESULTS_NOTES",
    "curve_columns",
    "format_table",
    "log_evaluations",
    "results_text",
    "save_curve",
]

#: What ``results.json`` holds, written into it so the file explains itself.
RESULTS_NOTES = {
    "learning_curve": (
        "one entry per finished training episode, in order: the timestep it ended at, its "
        "return and its length; played on train_split by the exploring (stochastic) policy"
    ),
    "random/untrained/trained": (
        "evaluation on eval_split, episode i on task i mod num_tasks: a uniformly random "
        "policy, the untrained model and the trained model (deterministic actions)"
    ),
}


def curve_columns(curve: list[tuple[int, float, int]]) -> dict[str, list[Any]]:
    """The learning curve as labelled columns."""
    return {
        "timestep": [c[0] for c in curve],
        "return": [round(c[1], 6) for c in curve],
        "length": [c[2] for c in curve],
    }


def results_text(results: dict[str, Any], columns: dict[str, list[Any]]) -> str:
    """``results.json``: the figures indented, each curve column on one line."""
    text = json.dumps({**results, "learning_curve": None, "notes": RESULTS_NOTES}, indent=2)
    rows = ",\n".join(
        f"    {json.dumps(name)}: {json.dumps(values, separators=(',', ':'))}"
        for name, values in columns.items()
    )
    return text.replace('"learning_curve": null', '"learning_curve": {\n' + rows + "\n  }") + "\n"


def save_curve(
    path: Path, curve: list[tuple[int, float, int]], results: dict[str, Any], title: str
) -> None:
    """The training returns over time, with the three evaluated policies as dashed lines.

    The title says why the lines differ from the curve: training episodes run
    on the train split with exploring actions, evaluations on the eval split
    with deterministic ones.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train_split, eval_split = results["train_split"], results["eval_split"]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    if curve:
        steps = np.array([c[0] for c in curve])
        returns = np.array([c[1] for c in curve])
        ax.scatter(
            steps, returns, s=3, alpha=0.25, color="tab:blue",
            label=f"training episode ({train_split} split, exploring)",
        )
        window = max(1, min(100, len(returns) // 10))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        ax.plot(
            steps[window - 1 :], smooth, color="tab:blue",
            label=f"training mean of {window} episodes",
        )
    rows = (
        ("random", "random policy", "tab:red"),
        ("untrained", "untrained policy", "tab:orange"),
        ("trained", "trained policy", "tab:green"),
    )
    for row, name, colour in rows:
        ax.axhline(
            results[row]["mean_return"],
            color=colour,
            linestyle="--",
            label=f"{name} ({eval_split} split, success {results[row]['success_rate']:.0%})",
        )
    ax.set_xlabel("timesteps")
    ax.set_ylabel("episode return")
    ax.set_title(
        f"{title}\ntraining episodes: {train_split} split, exploring actions; "
        f"dashed: evaluation on the {eval_split} split, deterministic actions",
        fontsize=9,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)  # beside the data
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def log_evaluations(model: Any, results: dict[str, Any]) -> str:
    """Write the random/untrained/trained figures through SB3's logger (``eval/...``);
    returns the run's TensorBoard folder."""
    logger_ = model.logger
    for row in ("random", "untrained", "trained"):
        for figure in ("success_rate", "mean_return", "mean_length"):
            logger_.record(f"eval/{row}/{figure}", results[row][figure])
    logger_.dump(model.num_timesteps)
    return str(logger_.get_dir())


def format_table(results: dict[str, Any]) -> str:
    """The random / untrained / trained rows of ``train``'s results as a text table."""
    lines = [
        f"{'policy':<10} {'success rate':>12} {'mean return':>12} {'mean length':>12}",
    ]
    for row in ("random", "untrained", "trained"):
        figures = results.get(row)
        if figures is None:
            continue
        lines.append(
            f"{row:<10} {figures['success_rate']:>12.2f} {figures['mean_return']:>12.3f} "
            f"{figures['mean_length']:>12.1f}"
        )
    return "\n".join(lines)
