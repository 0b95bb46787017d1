"""A user's own SDK environment, from a folder holding its package, as a user runs it.

The commands run with ``tmp_path`` as the working folder, which holds ``mylab/quiz.py``
(nothing installed). ``ors-gym serve mylab.quiz:Quiz`` and ``ors-gym eval`` on the
class and on the served URL (``--env-name`` among several) each run in a subprocess,
as a user runs them; one usage mistake does too (one line on stderr, exit code 2, no
traceback, with the SDK imported). ``register_class`` with ``gym.make`` and
``gym.make_vec``, ``ors-gym train`` on the class and the other usage mistakes run in
this process (fixture ``in_lab``: working folder ``lab``, and what importing ``mylab``
and registering ``Quiz`` leaves behind undone afterwards), since the SDK, torch and SB3
each take seconds to import in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from ors_gym import registration
from ors_gym.cli import main
from tests.cli.test_cli import _env, _read_serving_line, _stop

QUIZ = '''
from collections.abc import Sequence
from typing import Literal

from openreward.environments import (
    Environment, JSONObject, Split, TextBlock, ToolOutput, tool,
)
from pydantic import BaseModel


class Pick(BaseModel):
    choice: Literal["red", "blue"]


class Quiz(Environment):
    """Pick the colour the task names: reward 1 for it, else 0."""

    def __init__(self, task_spec: JSONObject | None = None, secrets=None) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self.colour = (task_spec or {}).get("colour", "red")

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return [Split(name="train", type="train"), Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"colour": "red"}, {"colour": "blue"}]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Pick {self.colour}.")]

    @tool
    async def pick(self, params: Pick) -> ToolOutput:
        """Pick a colour; this ends the episode."""
        won = params.choice == self.colour
        return ToolOutput(blocks=[TextBlock(text="yes" if won else "no")],
                          reward=1.0 if won else 0.0, finished=True)


class Other(Quiz):
    """A second environment, so a server of both needs --env-name."""
'''


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """``tmp_path`` holding the user's package ``mylab`` (not installed anywhere)."""
    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "__init__.py").write_text("")
    (tmp_path / "mylab" / "quiz.py").write_text(QUIZ)
    return tmp_path


@pytest.fixture
def in_lab(lab: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``lab`` as this process's working folder, for ``main`` run here as from a shell there.

    Afterwards the process is as before: ``sys.path`` (``main`` puts the working folder
    first), the ``mylab`` modules imported, the gym ids and class names registered.
    """
    monkeypatch.chdir(lab)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(registration, "_CLASS_NAMES", list(registration._CLASS_NAMES))
    specs = dict(gym.registry)
    try:
        yield lab
    finally:
        for name in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
            del sys.modules[name]
        gym.registry.clear()
        gym.registry.update(specs)


def _cli(lab: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ors_gym.cli", *args],
        capture_output=True, text=True, cwd=lab, env=_env(), timeout=timeout,
    )


@pytest.fixture
def served_lab(lab: Path) -> Iterator[str]:
    """``ors-gym serve mylab.quiz:Quiz mylab.quiz:Other --port 0`` run from ``lab``; its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ors_gym.cli", "serve", "mylab.quiz:Quiz", "mylab.quiz:Other",
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=lab, env=_env(),
    )
    try:
        match = _read_serving_line(proc)
        assert match["names"] == "quiz, other"
        yield match["url"]
    finally:
        _stop(proc)


def _summary(lab: Path, out: str) -> dict[str, object]:
    return dict(json.loads((lab / out / "summary.json").read_text()))


def test_eval_a_module_class_from_the_current_folder(lab: Path) -> None:
    done = _cli(lab, "eval", "mylab.quiz:Quiz", "--model", "scripted", "--episodes", "2",
                "--out", "out", "--no-progress-bar")
    assert done.returncode == 0, done.stderr
    summary = _summary(lab, "out")
    assert summary["env_id"] == "ors/Quiz-v0"
    assert summary["episodes"] == 2
    assert not [k for k in dict(summary["errors"]) if k.startswith(("env_", "endpoint_"))]


def test_serve_and_eval_a_served_env_by_name(lab: Path, served_lab: str) -> None:
    several = _cli(lab, "eval", "--env-url", served_lab, "--model", "scripted")
    assert several.returncode == 2
    assert several.stderr.strip().endswith("serves quiz, other: pick one with --env-name")
    assert "Traceback" not in several.stderr and len(several.stderr.splitlines()) == 1

    done = _cli(lab, "eval", "--env-url", served_lab, "--env-name", "quiz", "--model",
                "scripted", "--episodes", "2", "--out", "out", "--no-progress-bar")
    assert done.returncode == 0, done.stderr
    assert _summary(lab, "out")["env_id"] == "ors-remote/quiz-v0"  # a class never seen here

    remote_any = _cli(lab, "eval", "ors/Remote-v0", "--env-url", served_lab, "--env-name",
                      "other", "--model", "scripted", "--episodes", "1", "--out", "out2",
                      "--no-progress-bar")
    assert remote_any.returncode == 0, remote_any.stderr
    assert _summary(lab, "out2")["env_id"] == "ors-remote/other-v0"


def test_train_a_module_class(in_lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "mylab.quiz:Quiz", "--steps", "16", "--n-envs", "1",
                 "--eval-episodes", "1", "--no-progress-bar", "--out-dir", "run"])
    assert code == 0, capsys.readouterr().err
    results = json.loads((in_lab / "run" / "results.json").read_text())
    assert results["env_id"] == "ors/Quiz-v0"


def test_register_class_works_with_make_and_make_vec(in_lab: Path) -> None:
    sys.path.insert(0, str(in_lab))  # as ``python script.py`` there puts its folder first
    from mylab.quiz import Quiz

    env_id = registration.register_class(Quiz, split="train")
    env = gym.make(env_id)
    vec = gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point")
    try:
        env.reset(seed=0, options={"index": 1})
        step = env.step({"tool_calls": [{"name": "pick", "arguments": {"choice": "blue"}}]})
        vec.reset(seed=0)
        assert (env_id, step[1], step[2]) == ("ors/Quiz-v0", 1.0, True)
        assert (type(vec).__name__, vec.num_envs) == ("OrsVectorEnv", 2)
        # The class name as written, once known here.
        assert registration.remote_id("quiz") == "ors-remote/Quiz-v0"
        with pytest.raises(ValueError) as clash:
            registration.register_class(type("Math", (Quiz,), {}))
        assert "ors/Math-v0 is the bundled Math" in str(clash.value)
        assert "env_id=" in str(clash.value)
    finally:
        vec.close()
        env.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "mylab.nope:Quiz", "--model", "scripted"], "No module named 'mylab.nope'"),
        (["eval", "mylab.quiz:Nope", "--model", "scripted"], "cannot load environment"),
        (["eval", "mylab.quiz:Pick", "--model", "scripted"], "not a subclass"),
        (["eval", "nosuch/Env-v0", "--model", "scripted"], "unknown environment"),
        (["eval", "--model", "scripted"], "which environment?"),
        (["eval", "mylab.quiz:Quiz", "--env-url", "http://127.0.0.1:9", "--model", "scripted"],
         "runs in this process"),
        (["train", "--env", "mylab.quiz:Nope"], "cannot load environment"),
        (["serve", "mylab.quiz:Nope"], "cannot load environment"),
    ],
)
def test_usage_mistakes_are_one_line_and_exit_2(
    in_lab: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)  # an exception escaping main (a traceback in a shell) fails the test
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_usage_mistake_in_a_process_is_one_line_and_exit_2(lab: Path) -> None:
    """The same as a user's shell shows it: the module and the SDK imported, the class
    refused, and nothing else written to stderr (no log line or warning on the way)."""
    done = _cli(lab, "eval", "mylab.quiz:Pick", "--model", "scripted")
    assert done.returncode == 2, done.stderr
    assert "not a subclass" in done.stderr and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_an_unreachable_server_is_one_line_exit_1(lab: Path) -> None:
    done = _cli(lab, "eval", "ors/Remote-v0", "--env-url", "http://127.0.0.1:9",
                "--model", "scripted")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "127.0.0.1:9" in done.stderr
