"""The notebooks run top to bottom in a fresh kernel, with no server started by hand."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _run(name: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # The kernelspec runs "python": make it this venv's, and keep the SDK quiet and offline.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    monkeypatch.setenv("OPENREWARD_LOG_LEVEL", "WARNING")
    client = NotebookClient(
        nb, kernel_name="python3", timeout=240, resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{name}: a cell failed:\n{exc}")
    return nb


def _outputs(nb: nbformat.NotebookNode, kind: str) -> list[dict[str, object]]:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
            if o.get("output_type") == kind]


@pytest.mark.parametrize("name", ["quickstart.ipynb", "llm_loop.ipynb", "training.ipynb"])
def test_notebooks_are_committed_without_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _run("quickstart.ipynb", tmp_path, monkeypatch)
    text = "".join(str(o.get("text", "")) for o in _outputs(nb, "stream"))
    assert "Correct! | reward 1.0" in text  # dict action, and text in tags, both solved
    assert "parse_error" in text
    assert "| tool run: answer" in text  # the plain message went to QA's terminal tool
    assert any("image/png" in o.get("data", {}) for o in _outputs(nb, "display_data"))  # type: ignore[operator]


def test_llm_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _run("llm_loop.ipynb", tmp_path, monkeypatch)
    text = "".join(str(o.get("text", "")) for o in _outputs(nb, "stream"))
    assert "supports score_group: True" in text and "group score" in text
    assert (tmp_path / "runs" / "llm_loop" / "judged.jsonl").exists()  # ran in the tmp dir


@pytest.mark.slow
def test_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _run("training.ipynb", tmp_path, monkeypatch)
    assert any("image/png" in o.get("data", {}) for o in _outputs(nb, "display_data"))  # type: ignore[operator]
    assert (tmp_path / "runs" / "notebook-training" / "results.json").exists()
