"""``ors-gym harness``: N episodes of a bundled environment played by a Python SDK harness,
the model a gateway the command starts over the stand-in backend, one JSON line each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ors_gym.cli import main
from ors_gym.cli.harness import PRESETS
from ors_gym.harness import PRESETS as HARNESS_PRESETS
from ors_gym.tokens import Trajectory
from tests.harness._model import counter_player

pytestmark = pytest.mark.slow


def test_the_command_writes_one_json_line_per_episode(
        backend: Any, script: Any, tok: Any, tmp_path: Path, harness_python: str,
        capsys: Any) -> None:
    script.use(counter_player(tok))
    tok.save_pretrained(tmp_path / "tok")
    out = tmp_path / "episodes.jsonl"
    code = main(["harness", "ors/Counter-v0", "--split", "test", "-n", "2",
                 "--preset", "openai-agents", "--python", harness_python,
                 "--tokenizer", str(tmp_path / "tok"), "--backend", "vllm",
                 "--backend-url", backend.base_url, "--model", "tiny", "--deadline", "240",
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2
    assert sorted(line["task_spec"]["id"] for line in lines) == ["test-0", "test-1"]
    for line in lines:
        assert line["stop"] == "finished" and line["exit_status"] == 0
        assert line["reward"] == 1.0 and line["harness"] == "openai-agents"
        traj = Trajectory.from_dict(line["trajectory"])
        assert traj.reward == 1.0 and sum(traj.rows[0].mask) > 0
    assert "2/2 finished" in capsys.readouterr().err


def test_usage_mistakes_are_named(tmp_path: Path, capsys: Any) -> None:
    assert PRESETS == HARNESS_PRESETS
    common = ["--tokenizer", str(tmp_path), "--command", "agent {prompt}"]
    assert main(["harness", *common]) == 2
    assert "name the environment" in capsys.readouterr().err
    assert main(["harness", "ors/Counter-v0", "--tokenizer", str(tmp_path),
                 "--command", "agent"]) == 2
    assert "no argument holds {prompt}" in capsys.readouterr().err
    assert main(["harness", "ors/Nope-v0", *common]) == 2
    assert "not a registered environment" in capsys.readouterr().err


def test_an_unwritable_out_is_named_before_the_model_loads(tmp_path: Path, capsys: Any) -> None:
    missing = tmp_path / "no-such-folder" / "episodes.jsonl"
    assert main(["harness", "ors/Counter-v0", "--tokenizer", str(tmp_path / "no-tokenizer"),
                 "--command", "agent {prompt}", "--out", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--out {missing}: cannot write there" in err and "folder that exists" in err
