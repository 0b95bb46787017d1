"""``ors-gym nemo-gym``: the rows it writes are NeMo Gym's (its own request model reads them),
and the folder ``root`` prints is one NeMo Gym's launcher finds the ORS server in, with a
config its own models read.

Needs nemo-gym, which has a venv of its own: ``bash scripts/nemo-gym-venv.sh --test``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip(
    "nemo_gym.resources_server_registry",
    reason="nemo-gym has a venv of its own: bash scripts/nemo-gym-venv.sh --test",
)

from nemo_gym.config_types import DatasetConfig
from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.resources_server_registry import discover_resources_servers
from omegaconf import OmegaConf

from ors_gym.cli import main
from ors_gym.nemo_gym import OrsResourcesServerConfig, root


def test_dataset_writes_a_row_per_task_with_the_terminal_tool_hidden(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "rows.jsonl"
    argv = ["nemo-gym", "dataset", "ors/Counter-v0", "--split", "train", "--limit", "3",
            "--agent", "ors_simple_agent", "-o", str(out)]
    assert main(argv) == 0
    assert "wrote 3 rows" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["ors_index"] for row in rows] == [0, 1, 2]
    assert len({row["ors_prompt_sha256"] for row in rows}) == 3  # three prompts
    for row in rows:
        params = NeMoGymResponseCreateParamsNonStreaming.model_validate(
            row["responses_create_params"])
        names = {tool["name"] for tool in params.tools}
        assert names == {"increment", "decrement"}  # done, the terminal tool, is hidden
        assert "Make it equal" in params.input[0].content
        assert row["agent_ref"] == {"type": "responses_api_agents", "name": "ors_simple_agent"}


def test_dataset_refuses_a_command_naming_no_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["nemo-gym", "dataset", "-o", str(tmp_path / "rows.jsonl")]) == 2
    assert "name the environment" in capsys.readouterr().err
    assert main(["nemo-gym", "dataset", "ors/Nope-v0", "-o", str(tmp_path / "x")]) == 2
    missing = tmp_path / "no-such-folder" / "rows.jsonl"
    assert main(["nemo-gym", "dataset", "ors/Counter-v0", "-o", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err and not missing.parent.exists()


def test_root_is_where_nemo_gym_finds_the_server(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert main(["nemo-gym", "root"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed == root()
    monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", str(printed))  # what --search-dir sets
    found = discover_resources_servers()["ors"]
    assert found.domain == "agent"
    config = OmegaConf.to_container(OmegaConf.load(found.config_path))
    served = config["ors"]["resources_servers"]["ors"]  # type: ignore[index, call-overload]
    assert (found.config_path.parents[1] / served["entrypoint"]).is_file()
    checked = OrsResourcesServerConfig.model_validate(
        {**served, "host": "127.0.0.1", "port": 0, "name": "ors"})
    assert checked.env_id == "ors/Counter-v0"
    agent = config["ors_simple_agent"]["responses_api_agents"]["simple_agent"]  # type: ignore[index, call-overload]
    assert agent["resources_server"] == {"type": "resources_servers", "name": "ors"}
    for dataset in agent["datasets"]:
        DatasetConfig.model_validate(dataset)
