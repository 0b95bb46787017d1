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
is the library; the command line (:mod:`ors_gym.cli.train`) calls it. The run is
here; its parts live beside it: the environments (``_envs``), the
evaluation (``_eval``) and what a run writes (``_results``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from ors_gym.errors import OrsDependencyError
from ors_gym.train._envs import (
    DEFAULT_MAX_EPISODE_STEPS,
    OBSERVATIONS,
    NotTrainableError,
    check_trainable,
    make_env,
    trainable_observations,
)
from ors_gym.train._envs import IMAGE_SIZE as IMAGE_SIZE
from ors_gym.train._envs import TEXT_DIM as TEXT_DIM
from ors_gym.train._eval import Policy as Policy
from ors_gym.train._eval import eval_split as _eval_split
from ors_gym.train._eval import evaluate
from ors_gym.train._eval import model_policy as _model_policy
from ors_gym.train._eval import random_policy as _random_policy
from ors_gym.train._results import RESULTS_NOTES as RESULTS_NOTES
from ors_gym.train._results import curve_columns as _curve_columns
from ors_gym.train._results import format_table
from ors_gym.train._results import log_evaluations as _log_evaluations
from ors_gym.train._results import results_text as _results_text
from ors_gym.train._results import save_curve as _save_curve

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

#: Training steps of the default run (PPO, vector observations): enough for the bundled
#: GridWorld to be solved on nearly every held-out task.
DEFAULT_STEPS = 30_000

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


def _require_sb3() -> Any:
    try:
        import stable_baselines3
    except ImportError as exc:
        raise OrsDependencyError(
            "training needs Stable-Baselines3 and matplotlib: pip install 'ors-gym[sb3]'"
        ) from exc
    return stable_baselines3


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
    ``out_dir``. Returns the figures: rows ``random``, ``untrained``, ``trained``
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
        results["untrained"] = evaluate(eval_env, _model_policy(model), eval_episodes)

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
