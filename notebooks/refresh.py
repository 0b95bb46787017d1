"""Re-execute the notebooks and commit their outputs: ``python notebooks/refresh.py [NAME...]``.

Each notebook runs top to bottom in a fresh kernel, in a temporary folder
(so its ``runs/`` output stays out of the repository), and is written back
with its outputs, so it reads well on GitHub without running it.
``tests/test_notebooks.py`` checks that the committed outputs are not stale.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
NAMES = ("quickstart.ipynb", "llm_loop.ipynb", "training.ipynb")


def execute(path: Path, cwd: Path) -> nbformat.NotebookNode:
    """The notebook at ``path``, executed with ``cwd`` as its working folder."""
    nb = nbformat.read(path, as_version=4)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")
    client = NotebookClient(nb, kernel_name="python3", timeout=240,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def main(names: list[str]) -> None:
    for name in names or NAMES:
        with tempfile.TemporaryDirectory() as tmp:
            nb = execute(HERE / name, Path(tmp))
        nbformat.write(nb, HERE / name)
        print(f"refreshed {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
