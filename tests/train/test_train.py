"""``ors-gym train``: SB3 learns the bundled GridWorld, in-process and over HTTP."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from ors_gym.cli.train import add_parser
from ors_gym.train import format_table, train

ROWS = ("random", "untrained", "trained")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ors-gym")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def _check_outputs(results: dict[str, Any]) -> None:
    for row in ROWS:
        figures = results[row]
        assert 0.0 <= figures["success_rate"] <= 1.0
        assert 1.0 <= figures["mean_length"] <= results["max_episode_steps"]
    assert Path(results["model_path"]).stat().st_size > 0
    assert Path(results["curve_path"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = Path(results["results_path"]).read_text()
    saved = json.loads(text)
    assert saved["trained"] == results["trained"]
    assert (saved["train_split"], saved["eval_split"]) == ("train", "test")
    curve = saved["learning_curve"]
    assert list(curve) == ["timestep", "return", "length"]
    assert all(len(column) == results["training_episodes"] for column in curve.values())
    assert curve["timestep"] == sorted(curve["timestep"])
    assert all(1 <= n <= results["max_episode_steps"] for n in curve["length"])
    assert set(saved["notes"]) == {"learning_curve", "random/untrained/trained"}
    # Small and readable: a few dozen lines whatever the number of episodes.
    assert len(text.splitlines()) < 80, len(text.splitlines())
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith('"return"')]
    assert json.loads("{" + line.rstrip(",") + "}")["return"] == curve["return"]


@pytest.mark.slow
def test_ppo_learns_gridworld_far_above_random(tmp_path: Path) -> None:
    results = train(
        steps=12_000,
        seed=0,
        n_envs=4,
        out_dir=tmp_path,
        eval_episodes=64,
        progress_bar=False,
    )
    _check_outputs(results)
    random, trained = results["random"], results["trained"]
    assert trained["success_rate"] >= random["success_rate"] + 0.4, format_table(results)
    assert trained["mean_return"] > random["mean_return"] + 0.3, format_table(results)
    assert trained["mean_length"] < random["mean_length"], format_table(results)
    returns = json.loads(Path(results["results_path"]).read_text())["learning_curve"]["return"]
    first, last = returns[: len(returns) // 10], returns[-len(returns) // 10 :]
    assert sum(last) / len(last) > sum(first) / len(first) + 0.3  # the training returns rose


@pytest.mark.parametrize(
    ("algo", "obs", "n_envs"),
    [("PPO", "image", 2), ("A2C", "text", 2), ("DQN", "vector", 1)],
)
def test_every_algorithm_and_observation_runs(
    tmp_path: Path, algo: str, obs: str, n_envs: int
) -> None:
    results = train(
        algo=algo,
        obs=obs,
        steps=300,
        n_envs=n_envs,
        out_dir=tmp_path,
        eval_episodes=2,
        progress_bar=False,
        max_episode_steps=8,
    )
    assert (results["algo"], results["obs"], results["transport"]) == (algo, obs, "in-process")
    assert results["trained"]["episodes"] == 2 and results["eval_split"] == "test"
    _check_outputs(results)


def test_train_over_http(tmp_path: Path, server_url: str) -> None:
    results = train(
        base_url=server_url,
        steps=128,
        n_envs=1,
        out_dir=tmp_path,
        eval_episodes=2,
        progress_bar=False,
        max_episode_steps=5,
    )
    assert results["transport"] == "http"
    _check_outputs(results)


def test_bad_arguments_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"algo='SAC'; choose one of \['PPO', 'A2C', 'DQN'\]"):
        train(algo="SAC", out_dir=tmp_path)
    with pytest.raises(ValueError, match="obs='pixels'"):
        train(obs="pixels", out_dir=tmp_path)
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        train(steps=0, out_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown environment id 'ors/Nope-v0'"):
        train(env_id="ors/Nope-v0", steps=10, out_dir=tmp_path)


def test_cli_parses_and_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    args = parser.parse_args(["train"])
    defaults = (args.algo, args.obs, args.n_envs, args.env_id)
    assert defaults == ("PPO", "auto", 4, None)  # no --env: ors/GridWorld-v0
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--steps", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--algo", "sac"])

    args = parser.parse_args(
        ["train", "--algo", "a2c", "--steps", "64", "--n-envs", "1", "--eval-episodes", "1",
         "--max-episode-steps", "4", "--out-dir", str(tmp_path), "--no-progress-bar"]
    )
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "A2C on ors/GridWorld-v0" in out
    for row in ROWS:
        assert f"\n{row} " in out
    assert (tmp_path / "model.zip").exists() and (tmp_path / "learning_curve.png").exists()

    from ors_gym.cli import UsageError

    args = parser.parse_args(["train", "--env-id", "ors/Nope-v0"])
    with pytest.raises(UsageError, match="unknown environment 'ors/Nope-v0'"):
        args.handler(args)


def test_training_stops_at_the_steps_asked(tmp_path: Path) -> None:
    """PPO's rollouts are 256 x n_envs steps: 1000 asked used to run 1024 (the bar showed
    1,024/1,000); the run, and so SB3's progress bar, now ends at 1000."""
    results = train(steps=1000, n_envs=2, eval_episodes=1, out_dir=tmp_path, progress_bar=True)
    assert results["steps_run"] == 1000
    curve = json.loads(Path(results["results_path"]).read_text())["learning_curve"]
    assert max(curve["timestep"]) <= 1000


def test_tensorboard_through_sb3s_logger(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    results = train(steps=600, n_envs=2, eval_episodes=2, out_dir=tmp_path / "run",
                    progress_bar=False, tensorboard=tmp_path / "tb")
    run = Path(results["tensorboard_dir"])
    assert run.parent == tmp_path / "tb" and run.name == "PPO_1"
    events = EventAccumulator(str(run))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"rollout/ep_rew_mean", "time/fps", "eval/trained/success_rate",
            "eval/random/mean_return"} <= tags
    (trained,) = events.Scalars("eval/trained/mean_return")
    assert trained.value == pytest.approx(results["trained"]["mean_return"], abs=1e-6)


def test_cli_env_takes_any_registered_id_with_the_observation_it_supports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = _parser()
    args = parser.parse_args(
        ["train", "--env", "ors/Counter-v0", "--steps", "64", "--n-envs", "1",
         "--eval-episodes", "1", "--out-dir", str(tmp_path), "--no-progress-bar",
         "--tensorboard", str(tmp_path / "tb")]
    )
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "PPO on ors/Counter-v0 (text observations" in out  # Counter has no positions
    assert f"tensorboard: {tmp_path / 'tb' / 'PPO_1'}" in out
