"""The notebooks run top to bottom in a fresh kernel, with no server started by hand.

They are committed with their outputs (``python notebooks/refresh.py``), so
they read well without running them; each test here re-executes one and
checks that the committed text outputs are not stale: the same text, once
timings, ports and addresses are normalised (see :func:`_normalise`).
"""

from __future__ import annotations

import os
import re
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


_VOLATILE = (
    # timings: "'seconds': 0.0008", "0.06 s", "1234 env steps/s", "in 12.3 s (1234 steps/s)"
    (re.compile(r"""(['"]seconds['"]:\s*)[-\d.e]+"""), r"\1<t>"),
    (re.compile(r"\b\d+(?:\.\d+)?(\s*(?:s|ms|seconds|(?:env )?steps/s))\b"), r"<t>\1"),
    (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>"),  # ephemeral ports
    (re.compile(r"\b0x[0-9a-f]{6,}\b"), "0x<addr>"),  # object addresses in reprs
)


def _normalise(text: str) -> str:
    """``text`` with the parts that differ between two seeded runs replaced by placeholders."""
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def _texts(nb: nbformat.NotebookNode) -> list[list[str]]:
    """Per code cell, its text outputs (streams, text/plain and text/html), normalised;
    consecutive pieces of one stream are joined (the kernel flushes them as it likes)."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        texts: list[str] = []
        for output in cell.outputs:
            if output.get("output_type") == "stream":
                head = f"{output['name']}: "
                if texts and texts[-1].startswith(head):  # one print may arrive in pieces
                    texts[-1] += output["text"]
                else:
                    texts.append(head + output["text"])
            for kind in ("text/plain", "text/html"):
                if kind in output.get("data", {}):
                    texts.append(f"{kind}: {output['data'][kind]}")
        cells.append([_normalise(t) for t in texts])
    return cells


def _assert_not_stale(name: str, executed: nbformat.NotebookNode) -> None:
    committed = nbformat.read(NOTEBOOKS / name, as_version=4)
    for number, (old, new) in enumerate(zip(_texts(committed), _texts(executed), strict=True)):
        assert old == new, (
            f"{name}: the committed outputs of code cell {number} are stale; "
            "run `python notebooks/refresh.py` and commit the notebooks"
        )


@pytest.mark.parametrize("name", ["quickstart.ipynb", "llm_loop.ipynb", "training.ipynb"])
def test_notebooks_are_committed_with_outputs(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert any(cell.outputs for cell in code)


def test_normalise_keeps_results_and_drops_timings() -> None:
    a = "{'seconds': 0.0008, 'reward': 1.0} wall time 0.06 s; 1234 env steps/s; 127.0.0.1:43295"
    b = "{'seconds': 0.0011, 'reward': 1.0} wall time 0.31 s; 987 env steps/s; 127.0.0.1:50001"
    assert _normalise(a) == _normalise(b)
    assert _normalise("reward 1.0") != _normalise("reward 0.0")


def test_quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _run("quickstart.ipynb", tmp_path, monkeypatch)
    text = "".join(str(o.get("text", "")) for o in _outputs(nb, "stream"))
    assert "Correct! | reward 1.0" in text  # dict action, and text in tags, both solved
    assert "parse_error" in text
    assert "| tool run: answer" in text  # the plain message went to QA's terminal tool
    assert any("image/png" in o.get("data", {}) for o in _outputs(nb, "display_data"))  # type: ignore[operator]
    assert any("text/html" in o.get("data", {}) for o in _outputs(nb, "display_data"))  # type: ignore[operator]
    _assert_not_stale("quickstart.ipynb", nb)


def test_llm_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _run("llm_loop.ipynb", tmp_path, monkeypatch)
    text = "".join(str(o.get("text", "")) for o in _outputs(nb, "stream"))
    assert "supports score_group: True" in text and "group score" in text
    assert (tmp_path / "runs" / "llm_loop" / "judged.jsonl").exists()  # ran in the tmp dir
    assert "mean reward" in text and (tmp_path / "runs" / "llm_loop" / "eval").is_dir()
    html = [o["data"]["text/html"] for o in _outputs(nb, "execute_result")
            if "text/html" in o.get("data", {})]
    assert html and "data:image/png;base64," in html[-1]  # the transcript, images inline
    _assert_not_stale("llm_loop.ipynb", nb)


@pytest.mark.slow
def test_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _run("training.ipynb", tmp_path, monkeypatch)
    assert any("image/png" in o.get("data", {}) for o in _outputs(nb, "display_data"))  # type: ignore[operator]
    assert (tmp_path / "runs" / "notebook-training" / "results.json").exists()
    _assert_not_stale("training.ipynb", nb)
