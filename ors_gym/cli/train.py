"""``ors-gym train``: the command line of :mod:`ors_gym.train` (the main job).

Parses the options, runs :func:`ors_gym.train.train`, prints the summary. An
environment it cannot train (no finite action set, or no such observation)
is a usage error: one line naming the ids it can train and with which
``--obs``, exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ors_gym.cli._target import add_env_arguments, resolve_target
from ors_gym.cli.args import EXIT_OK, Subparsers, UsageError, int_type
from ors_gym.train import (
    ALGOS,
    DEFAULT_MAX_EPISODE_STEPS,
    DEFAULT_STEPS,
    OBSERVATIONS,
    NotTrainableError,
    check_trainable,
    format_table,
    train,
    trainable_observations,
)

__all__ = ["add_parser"]

_DEFAULT_ENV_ID = "ors/GridWorld-v0"


def add_parser(subparsers: Subparsers) -> None:
    """Add ``train`` to ``subparsers``; ``--help`` shows every default."""
    parser = subparsers.add_parser(
        "train",
        help="train a Stable-Baselines3 agent on an ORS environment (default: GridWorld, PPO)",
        description=(
            "Train a Stable-Baselines3 agent on an ORS environment and compare it with a "
            "random policy on held-out tasks. By default the bundled GridWorld runs in this "
            "process; --env-url trains against a running ORS server instead. Writes "
            "model.zip, learning_curve.png and results.json under --out-dir."
        ),
    )
    positive = int_type("value", 1)
    parser.add_argument(
        "env", metavar="ENV", nargs="?", default=None,
        help="a registered gym id, a 'module:Class' SDK environment (imported from the "
        f"current folder), or with --env-url the server's (default: {_DEFAULT_ENV_ID}); "
        "as eval takes it",
    )
    parser.add_argument(
        "--env", "--env-id", dest="env_id", default=None, metavar="ENV",
        help="the same as ENV (either one)",
    )
    parser.add_argument(
        "--algo", default="PPO", choices=ALGOS, type=str.upper,
        help="algorithm (default: %(default)s)",
    )
    parser.add_argument(
        "--steps", type=positive, default=DEFAULT_STEPS,
        help="training timesteps (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    parser.add_argument(
        "--env-url", "--base-url", dest="base_url", default=None,
        help="an ORS server: trains --env there, or without --env the environment it serves "
        f"(--env-name picks one; {_DEFAULT_ENV_ID}'s when it serves several) "
        "(default: the environment in-process)",
    )
    add_env_arguments(parser)
    parser.add_argument(
        "--obs", default="auto", choices=("auto", *OBSERVATIONS),
        help="observation: vector (GridWorld's agent/goal positions), image, or text "
        "(any environment); auto: the first of these the environment supports "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--n-envs", type=positive, default=4, help="parallel envs (default: %(default)s)"
    )
    parser.add_argument(
        "--out-dir", default="runs/train", help="output directory (default: %(default)s)"
    )
    parser.add_argument(
        "--eval-episodes", type=positive, default=50,
        help="episodes per evaluation (default: %(default)s)",
    )
    parser.add_argument(
        "--max-episode-steps", type=positive, default=DEFAULT_MAX_EPISODE_STEPS,
        help="episode step limit (default: %(default)s)",
    )
    parser.add_argument(
        "--no-progress-bar", action="store_true", help="hide the training progress bar"
    )
    parser.add_argument(
        "--tensorboard", default=None, metavar="DIR",
        help="log training through SB3's TensorBoard logger into DIR",
    )
    parser.set_defaults(handler=_run)


class _QuietProbe(logging.Filter):
    """Drops the wrappers' note on a left-out terminal tool while environments are probed
    (each wrapper tried would repeat it); ``train`` says it once, in its own words."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("DiscreteToolActions: the terminal tool")


@contextmanager
def _quiet_probe() -> Iterator[None]:
    logger, quiet = logging.getLogger("ors_gym"), _QuietProbe()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _trainable_ids() -> str:
    """``ors/GridWorld-v0 (--obs vector, image or text), ...``: the bundled ids ``train``
    accepts, each with the observations it works with (checked in this process)."""
    from ors_gym.envs import BUNDLED

    listed = []
    for name in BUNDLED:
        env_id = f"ors/{name}-v0"
        with _quiet_probe():
            observations = trainable_observations(env_id)
        if observations:
            choices = " or ".join(", ".join(observations).rsplit(", ", 1))
            listed.append(f"{env_id} (--obs {choices})")
    return ", ".join(listed) or "none"


def _not_trainable(env_id: str, reason: str) -> UsageError:
    """The usage error for an environment ``train`` cannot train, and what it can."""
    return UsageError(
        f"cannot train on {env_id}: {reason}. Trainable bundled ids: {_trainable_ids()}. "
        "For another environment, list its calls in Python with "
        "ors_gym.wrappers.DiscreteToolActions(env, calls=[...]) and train on that"
    )


def _auto_obs(env_id: str, base_url: str | None) -> str:
    """The first of ``OBSERVATIONS`` ``env_id`` can be trained with (so the wrappers it
    needs), or the usage error saying why none can."""
    reason = ""
    for obs in OBSERVATIONS:
        try:
            with _quiet_probe():
                check_trainable(env_id, obs=obs, base_url=base_url)
        except NotTrainableError as exc:
            reason = exc.reason
            continue
        return obs
    raise _not_trainable(env_id, reason)


def _check_obs(env_id: str, obs: str, base_url: str | None) -> None:
    """The usage error when ``env_id`` cannot be trained with ``obs``: checked before
    :func:`train` imports torch and SB3, so a mistake is reported without that wait."""
    try:
        with _quiet_probe():
            check_trainable(env_id, obs=obs, base_url=base_url)
    except NotTrainableError as exc:
        raise _not_trainable(env_id, exc.reason) from exc


def _left_out_terminal(env_id: str, obs: str, base_url: str | None, max_steps: int) -> str | None:
    """The warning when the discrete actions ``train`` builds for ``env_id`` leave out its
    terminal tool: no action can then end an episode through it, nor earn a reward it gives."""
    from ors_gym.train import make_env
    from ors_gym.wrappers import DiscreteToolActions

    with _quiet_probe():
        env = make_env(env_id, obs=obs, base_url=base_url, max_episode_steps=max_steps)
    try:
        terminal = getattr(env.unwrapped.action_space, "terminal_tool", None)
        layer: Any = env
        while layer is not None and not isinstance(layer, DiscreteToolActions):
            layer = getattr(layer, "env", None)
        if terminal is None or layer is None:
            return None
        if any(call["name"] == terminal.name for call in layer.calls):
            return None
        actions = ", ".join(layer.action_meanings())
        why = f"its argument {terminal.arg!r} is free text" if terminal.arg else "it is hidden"
        return (
            f"the actions ({actions}) leave out {env_id}'s terminal tool {terminal.name!r} "
            f"({why}), so no action can end an episode through it or earn a reward it gives; "
            f"episodes end at --max-episode-steps {max_steps} unless another tool ends them. "
            "To train with it, list its calls in Python: "
            "ors_gym.wrappers.DiscreteToolActions(env, calls=[...])"
        )
    finally:
        env.close()


def _run(args: argparse.Namespace) -> int:
    import ors_gym  # noqa: F401 - registers the ors/... ids

    if args.env is not None and args.env_id is not None and args.env != args.env_id:
        raise UsageError(f"two environments given ({args.env} and --env {args.env_id}): give one")
    env = args.env if args.env is not None else args.env_id
    target = resolve_target(env, args.base_url, args.env_name, default=_DEFAULT_ENV_ID)
    env_id, base_url = target.env_id, target.options.get("base_url", args.base_url)
    if "env_name" in target.options:
        raise UsageError("--env-name picks a server's environment: give --env-url without --env")
    obs = args.obs
    if obs == "auto":
        obs = _auto_obs(env_id, base_url)
    else:
        _check_obs(env_id, obs, base_url)
    note = _left_out_terminal(env_id, obs, base_url, args.max_episode_steps)
    if note is not None:
        print(f"ors-gym train: warning: {note}", file=sys.stderr)
    try:
        with _quiet_probe():  # the wrappers' note on the terminal tool: said above
            results = train(
                env_id=env_id,
                algo=args.algo,
                steps=args.steps,
                seed=args.seed,
                base_url=base_url,
                obs=obs,
                n_envs=args.n_envs,
                out_dir=args.out_dir,
                eval_episodes=args.eval_episodes,
                progress_bar=not args.no_progress_bar,
                max_episode_steps=args.max_episode_steps,
                tensorboard=args.tensorboard,
            )
    except NotTrainableError as exc:
        raise _not_trainable(exc.env_id, exc.reason) from exc
    print(
        f"{results['algo']} on {results['env_id']} ({results['obs']} observations, "
        f"{results['transport']}): {results['steps']} steps in {results['train_seconds']:.1f} s "
        f"({results['steps_per_second']:.0f} steps/s); evaluated on "
        f"{int(results['trained']['episodes'])} episodes of the {results['eval_split']!r} split"
    )
    print(format_table(results))
    print(f"model: {results['model_path']}")
    print(f"learning curve: {results['curve_path']}")
    print(f"results: {results['results_path']}")
    if results.get("tensorboard_dir"):
        print(f"tensorboard: {results['tensorboard_dir']} (tensorboard --logdir "
              f"{args.tensorboard})")
    print(f"total wall time: {results['wall_seconds']:.1f} s")
    return EXIT_OK
