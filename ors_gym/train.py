"""Train a Stable-Baselines3 agent on an ORS environment and measure it (``ors-gym train``).

The main job of the package, end to end: an ORS environment (the bundled
GridWorld, hosted in this process by default, or any server with
``base_url``) wrapped into the fixed spaces SB3 needs
(``DiscreteToolActions`` + ``MetadataVector`` / ``ImageObservation`` /
``TextVector``), a random-policy baseline, the untrained policy, SB3 training,
the trained policy, and a table of the three on held-out tasks::

    env -> DiscreteToolActions -> observation wrapper -> Monitor -> DummyVecEnv -> PPO

Evaluation uses the ``test`` split when the environment has one (else the
training split): episode ``i`` runs task ``i mod num_tasks``, so every policy
faces the same tasks. An episode succeeds when the environment finished it
(``terminated``) with a positive final reward; running out of steps fails.

An environment is trainable here when its tool calls can be enumerated
(``DiscreteToolActions``) and it reports the chosen observation;
:func:`check_trainable` says why not (:class:`NotTrainableError`). This module
is the library; the command line (:mod:`ors_gym.cli.train`) calls it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ors_gym.errors import OrsDependencyError
from ors_gym.wrappers import (
    DiscreteToolActions,
    ImageObservation,
    MetadataVector,
    MissingValueError,
    NotEnumerableError,
    TextVector,
)

__all__ = [
    "ALGOS",
    "DEFAULT_MAX_EPISODE_STEPS",
    "DEFAULT_STEPS",
    "HYPERPARAMETERS",
    "OBSERVATIONS",
    "NotTrainableError",
    "check_trainable",
    "evaluate",
    "format_table",
    "make_env",
    "train",
    "trainable_observations",
]

logger = logging.getLogger("ors_gym")

ALGOS = ("PPO", "A2C", "DQN")
OBSERVATIONS = ("vector", "image", "text")

#: Training steps of the default run (PPO, vector observations): enough for the bundled
#: GridWorld to be solved on nearly every held-out task, in about a minute on 2 CPU cores.
DEFAULT_STEPS = 30_000
#: The bundled GridWorld needs at most 8 moves; 15 leaves room for detours while keeping a
#: random walk's success rate low, so learning shows clearly.
DEFAULT_MAX_EPISODE_STEPS = 15
#: The bundled GridWorld's 160 px frames (5x5 cells of 32 px) nearest-resized to 8 px per
#: cell: the same pixels as drawing the grid at 8 px, with a quarter of the CNN's input.
IMAGE_SIZE = (40, 40)
TEXT_DIM = 256

#: Per-algorithm SB3 keyword arguments, tuned for small discrete tasks such as GridWorld.
HYPERPARAMETERS: dict[str, dict[str, Any]] = {
    "PPO": {
        "n_steps": 256,
        "batch_size": 256,
        "n_epochs": 4,
        "learning_rate": 1e-3,
        "gamma": 0.95,
        "gae_lambda": 0.95,
        "ent_coef": 0.01,
    },
    "A2C": {"n_steps": 16, "learning_rate": 1e-3, "gamma": 0.95, "ent_coef": 0.01},
    "DQN": {
        "learning_rate": 1e-3,
        "buffer_size": 20_000,
        "learning_starts": 1_000,
        "batch_size": 64,
        "gamma": 0.95,
        "train_freq": 4,
        "target_update_interval": 500,
        "exploration_fraction": 0.3,
        "exploration_final_eps": 0.05,
    },
}


class NotTrainableError(ValueError):
    """``env_id`` cannot be trained with these options; ``reason`` says why in one clause."""

    def __init__(self, env_id: str, reason: str, hint: str = "") -> None:
        super().__init__(f"cannot train on {env_id}: {reason}{f'; {hint}' if hint else ''}")
        self.env_id, self.reason = env_id, reason


def _require_sb3() -> Any:
    try:
        import stable_baselines3
    except ImportError as exc:
        raise OrsDependencyError(
            "training needs Stable-Baselines3 and matplotlib: pip install 'ors-gym[sb3]'"
        ) from exc
    return stable_baselines3


# -- environments ------------------------------------------------------------------------------


def _make_ors_env(
    env_id: str, *, base_url: str | None, max_episode_steps: int
) -> gym.Env[Any, Any]:
    """``gym.make(env_id)``, over HTTP at ``base_url`` when given (in-process otherwise)."""
    import ors_gym  # noqa: F401 - registers the ors/... ids

    if env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("ors/"))
        raise ValueError(f"unknown environment id {env_id!r}; registered ORS ids: {known}")
    kwargs: dict[str, Any] = {
        "max_episode_steps": max_episode_steps,
        "max_steps": max_episode_steps,
    }
    if base_url is not None:
        spec = gym.spec(env_id)
        kwargs.update(base_url=base_url, env_class=None)
        if not spec.kwargs.get("env_name"):
            kwargs["env_name"] = spec.name.lower()  # ors/GridWorld-v0 -> "gridworld"
    return gym.make(env_id, **kwargs)


def _grid_size(env: gym.Env[Any, Any]) -> int:
    """The largest ``size`` among the environment's tasks (GridWorld task specs; default 5)."""
    ors = env.unwrapped
    sizes = [5]
    for split in (s.name for s in ors.backend.splits(ors.env_name)):  # type: ignore[attr-defined]
        for i in range(ors.num_tasks(split)):  # type: ignore[attr-defined]
            size = ors.task(i, split).get("size")  # type: ignore[attr-defined]
            if isinstance(size, int):
                sizes.append(size)
    return max(sizes)


def make_env(
    env_id: str = "ors/GridWorld-v0",
    *,
    obs: str = "vector",
    base_url: str | None = None,
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS,
) -> gym.Env[Any, Any]:
    """The ORS env ``env_id`` wrapped for SB3: discrete tool calls, array observations.

    ``obs``: ``"vector"`` (agent and goal ``[row, col]`` from GridWorld's
    metadata, scaled to ``[-1, 1]``), ``"image"`` (the step's image resized to
    40x40x3 uint8, for ``CnnPolicy``) or ``"text"`` (the observation text,
    feature-hashed to 256 floats; works for any environment). Raises
    :class:`NotTrainableError` when the tool calls cannot be enumerated.
    """
    if obs not in OBSERVATIONS:
        raise ValueError(f"obs={obs!r}; choose one of {list(OBSERVATIONS)}")
    env = _make_ors_env(env_id, base_url=base_url, max_episode_steps=max_episode_steps)
    try:
        try:
            env = DiscreteToolActions(env)
        except NotEnumerableError as exc:
            raise NotTrainableError(
                env_id,
                f"it has no finite set of actions ({exc.reason})",
                "list its calls in Python: DiscreteToolActions(env, calls=[...])",
            ) from exc
        if obs == "vector":
            high = _grid_size(env) - 1
            return MetadataVector(
                env, keys={"agent": 2, "goal": 2}, low=0, high=high, normalize=True
            )
        if obs == "image":
            return ImageObservation(env, size=IMAGE_SIZE, resample="nearest")
        return TextVector(env, dim=TEXT_DIM)
    except Exception:
        env.close()
        raise


def check_trainable(
    env_id: str,
    *,
    obs: str = "vector",
    base_url: str | None = None,
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS,
) -> None:
    """Build the training environment once and reset it; raise :class:`NotTrainableError`
    when its calls cannot be enumerated or its first observation lacks what ``obs`` reads
    (``vector``: ``agent``/``goal`` metadata; ``image``: an image)."""
    env = make_env(env_id, obs=obs, base_url=base_url, max_episode_steps=max_episode_steps)
    try:
        if obs == "image":
            first, _ = env.unwrapped.reset()
            if not first.get("images"):
                raise NotTrainableError(env_id, "its observations hold no image for --obs image")
        env.reset()
    except MissingValueError as exc:
        raise NotTrainableError(
            env_id, "its steps report no agent/goal positions for --obs vector"
        ) from exc
    finally:
        env.close()


def trainable_observations(env_id: str, *, base_url: str | None = None) -> list[str]:
    """The ``obs`` choices ``env_id`` can be trained with (empty: none of them)."""
    ok = []
    for obs in OBSERVATIONS:
        try:
            check_trainable(env_id, obs=obs, base_url=base_url)
        except NotTrainableError:
            continue
        ok.append(obs)
    return ok


# -- evaluation --------------------------------------------------------------------------------

Policy = Callable[[Any], int]


def _eval_split(env: gym.Env[Any, Any]) -> str:
    ors = env.unwrapped
    names = [s.name for s in ors.backend.splits(ors.env_name)]  # type: ignore[attr-defined]
    return "test" if "test" in names else ors.default_split()  # type: ignore[attr-defined]


def evaluate(
    env: gym.Env[Any, Any], policy: Policy, episodes: int, *, split: str | None = None
) -> dict[str, float]:
    """Run ``policy`` for ``episodes`` episodes; success rate, mean return, mean length.

    Episode ``i`` plays task ``i mod num_tasks`` of ``split`` (default: ``test``
    if the environment has it), so policies evaluated with the same ``episodes``
    face the same tasks. Success: the environment ended the episode
    (``terminated``) with a positive final reward.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    split = split or _eval_split(env)
    n_tasks = env.unwrapped.num_tasks(split)  # type: ignore[attr-defined]
    successes, returns, lengths = 0, [], []
    for episode in range(episodes):
        obs, _ = env.reset(options={"split": split, "index": episode % n_tasks})
        total, length, done = 0.0, 0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += float(reward)
            length += 1
            done = terminated or truncated
        successes += int(terminated and float(reward) > 0)
        returns.append(total)
        lengths.append(length)
    return {
        "success_rate": successes / episodes,
        "mean_return": float(np.mean(returns)),
        "mean_length": float(np.mean(lengths)),
        "episodes": float(episodes),
    }


def _random_policy(env: gym.Env[Any, Any], seed: int) -> Policy:
    space = env.action_space
    space.seed(seed)
    return lambda obs: int(space.sample())


def _model_policy(model: Any) -> Policy:
    def act(obs: Any) -> int:
        action, _ = model.predict(obs, deterministic=True)
        return int(action)

    return act


# -- training ----------------------------------------------------------------------------------


def _curve_callback(curve: list[tuple[int, float, int]]) -> Any:
    """An SB3 callback appending ``(timestep, return, length)`` per finished training episode."""
    from stable_baselines3.common.callbacks import BaseCallback

    class _Curve(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals.get("infos", ()):
                episode = info.get("episode")
                if episode is not None:
                    curve.append((int(self.num_timesteps), float(episode["r"]), int(episode["l"])))
            return True

    return _Curve()


def _stop_at(steps: int) -> Any:
    """An SB3 callback that ends training once ``steps`` timesteps have run.

    SB3 runs whole rollouts (PPO: ``n_steps * n_envs`` timesteps each), so
    30,000 steps asked would run 30,720; stopping here makes the run, its
    progress bar and ``steps_per_second`` end at the steps asked. A rollout cut
    short is not learned from (SB3 trains on full rollouts only).
    """
    from stable_baselines3.common.callbacks import BaseCallback

    class _StopAt(BaseCallback):
        def _on_step(self) -> bool:
            return bool(self.num_timesteps < steps)

    return _StopAt()


#: What ``results.json`` holds, written into it so the file explains itself.
RESULTS_NOTES = {
    "learning_curve": (
        "one entry per finished training episode, in order: the timestep it ended at, its "
        "return and its length; played on train_split by the exploring (stochastic) policy"
    ),
    "random/before/trained": (
        "evaluation on eval_split, episode i on task i mod num_tasks: a uniformly random "
        "policy, the untrained model and the trained model (deterministic actions)"
    ),
}


def _curve_columns(curve: list[tuple[int, float, int]]) -> dict[str, list[Any]]:
    """The learning curve as labelled columns."""
    return {
        "timestep": [c[0] for c in curve],
        "return": [round(c[1], 6) for c in curve],
        "length": [c[2] for c in curve],
    }


def _results_text(results: dict[str, Any], columns: dict[str, list[Any]]) -> str:
    """``results.json``: the figures indented, each curve column on one line."""
    text = json.dumps({**results, "learning_curve": None, "notes": RESULTS_NOTES}, indent=2)
    rows = ",\n".join(
        f"    {json.dumps(name)}: {json.dumps(values, separators=(',', ':'))}"
        for name, values in columns.items()
    )
    return text.replace('"learning_curve": null', '"learning_curve": {\n' + rows + "\n  }") + "\n"


def _save_curve(
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
        ("before", "untrained policy", "tab:orange"),
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


def train(
    env_id: str = "ors/GridWorld-v0",
    algo: str = "PPO",
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    base_url: str | None = None,
    obs: str = "vector",
    n_envs: int = 4,
    out_dir: str | Path = "runs/train",
    eval_episodes: int = 50,
    progress_bar: bool = True,
    *,
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS,
    torch_threads: int | None = 1,
    tensorboard: str | Path | None = None,
) -> dict[str, Any]:
    """Train ``algo`` on ``env_id`` for ``steps`` timesteps and compare it with a random policy.

    Evaluates a random policy and the untrained policy, trains (``n_envs``
    environments in a ``DummyVecEnv``), evaluates the trained policy, and
    writes ``model.zip``, ``learning_curve.png`` and ``results.json`` under
    ``out_dir``. Returns the figures: rows ``random``, ``before``, ``trained``
    (each ``success_rate``, ``mean_return``, ``mean_length``), timings and paths.
    ``torch_threads`` caps torch's CPU threads while training (small networks
    run fastest on one); None leaves torch's setting alone. ``tensorboard``: a
    folder for SB3's own TensorBoard logger (``rollout/ep_rew_mean``,
    ``train/loss``..., one ``<ALGO>_<n>`` run per call; needs the ``tensorboard``
    package), plus the three evaluations as ``eval/<policy>/<figure>``. Training
    stops at exactly ``steps`` timesteps (rounded up to a multiple of
    ``n_envs``), not at the end of SB3's last whole rollout. Raises
    :class:`NotTrainableError` (before writing anything) when ``env_id`` cannot be
    trained with ``obs`` (see :func:`check_trainable`).
    """
    sb3 = _require_sb3()
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    algo = algo.upper()
    if algo not in ALGOS:
        raise ValueError(f"algo={algo!r}; choose one of {list(ALGOS)}")
    if obs not in OBSERVATIONS:
        raise ValueError(f"obs={obs!r}; choose one of {list(OBSERVATIONS)}")
    for name, value in (("steps", steps), ("n_envs", n_envs), ("eval_episodes", eval_episodes)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if algo == "DQN" and n_envs != 1:
        logger.info("DQN: training with %d environments (one replay buffer)", n_envs)

    started = time.perf_counter()
    check_trainable(env_id, obs=obs, base_url=base_url, max_episode_steps=max_episode_steps)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def factory(rank: int) -> Callable[[], gym.Env[Any, Any]]:
        def build() -> gym.Env[Any, Any]:
            # SB3 seeds env ``rank`` with ``seed + rank`` at its first reset (model seed=).
            env = make_env(
                env_id, obs=obs, base_url=base_url, max_episode_steps=max_episode_steps
            )
            return Monitor(env)

        return build

    import torch

    previous_threads = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    eval_env = make_env(env_id, obs=obs, base_url=base_url, max_episode_steps=max_episode_steps)
    vec_env = DummyVecEnv([factory(i) for i in range(n_envs)])
    try:
        results: dict[str, Any] = {
            "env_id": env_id,
            "algo": algo,
            "obs": obs,
            "steps": steps,
            "n_envs": n_envs,
            "seed": seed,
            "max_episode_steps": max_episode_steps,
            "train_split": eval_env.unwrapped.default_split(),  # type: ignore[attr-defined]
            "eval_split": _eval_split(eval_env),
            "transport": "http" if base_url else "in-process",
        }
        results["random"] = evaluate(eval_env, _random_policy(eval_env, seed), eval_episodes)

        algo_cls = getattr(sb3, algo)
        policy = "CnnPolicy" if obs == "image" else "MlpPolicy"
        if tensorboard is not None:
            _require_tensorboard()
        model = algo_cls(
            policy, vec_env, seed=seed, verbose=0,
            tensorboard_log=None if tensorboard is None else str(tensorboard),
            **HYPERPARAMETERS[algo],
        )
        results["before"] = evaluate(eval_env, _model_policy(model), eval_episodes)

        curve: list[tuple[int, float, int]] = []
        train_start = time.perf_counter()
        model.learn(
            total_timesteps=steps,
            callback=[_curve_callback(curve), _stop_at(steps)],
            progress_bar=progress_bar,
            tb_log_name=algo,
        )
        results["train_seconds"] = time.perf_counter() - train_start
        results["steps_per_second"] = model.num_timesteps / results["train_seconds"]
        results["trained"] = evaluate(eval_env, _model_policy(model), eval_episodes)
        results["steps_run"] = int(model.num_timesteps)
        if tensorboard is not None:
            results["tensorboard_dir"] = _log_evaluations(model, results)

        model_path = out / "model.zip"
        model.save(model_path)
        curve_path = out / "learning_curve.png"
        _save_curve(curve_path, curve, results, f"{algo} on {env_id} ({obs} observations)")
        results["training_episodes"] = len(curve)
        results["model_path"] = str(model_path)
        results["curve_path"] = str(curve_path)
        results["results_path"] = str(out / "results.json")
        results["wall_seconds"] = time.perf_counter() - started
        (out / "results.json").write_text(_results_text(results, _curve_columns(curve)))
        logger.info("training finished:\n%s", format_table(results))
        return results
    finally:
        vec_env.close()
        eval_env.close()
        if torch_threads is not None:
            torch.set_num_threads(previous_threads)


def _require_tensorboard() -> None:
    try:
        import tensorboard  # noqa: F401
    except ImportError as exc:
        raise OrsDependencyError(
            "--tensorboard needs the tensorboard package: pip install 'ors-gym[sb3]'"
        ) from exc


def _log_evaluations(model: Any, results: dict[str, Any]) -> str:
    """Write the random/before/trained figures through SB3's logger (``eval/...``);
    returns the run's TensorBoard folder."""
    logger_ = model.logger
    for row in ("random", "before", "trained"):
        for figure in ("success_rate", "mean_return", "mean_length"):
            logger_.record(f"eval/{row}/{figure}", results[row][figure])
    logger_.dump(model.num_timesteps)
    return str(logger_.get_dir())


def format_table(results: dict[str, Any]) -> str:
    """The random / before / trained rows of ``train``'s results as a text table."""
    lines = [
        f"{'policy':<10} {'success rate':>12} {'mean return':>12} {'mean length':>12}",
    ]
    for row in ("random", "before", "trained"):
        figures = results.get(row)
        if figures is None:
            continue
        lines.append(
            f"{row:<10} {figures['success_rate']:>12.2f} {figures['mean_return']:>12.3f} "
            f"{figures['mean_length']:>12.1f}"
        )
    return "\n".join(lines)
