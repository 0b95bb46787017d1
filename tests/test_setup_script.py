"""``scripts/setup.sh`` skips ``pip install`` when the venv already matches pyproject.toml."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _installed_checkout(env: dict[str, str]) -> Path | None:
    """The checkout this venv's installed ors_gym comes from (imported outside any checkout)."""
    done = subprocess.run(
        [sys.executable, "-c", "import ors_gym; print(ors_gym.__file__)"],
        capture_output=True, text=True, cwd="/", env=env, timeout=120,
    )
    return Path(done.stdout.strip()).resolve().parents[1] if done.returncode == 0 else None


def test_setup_skips_pip_install_when_nothing_changed() -> None:
    venv = Path(sys.prefix)
    stamp = venv / ".ors-gym-setup.sha256"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wanted = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()
    if (
        not (venv / "bin" / "activate").exists()
        or not stamp.exists()
        or stamp.read_text().strip() != wanted
        or _installed_checkout(env) != REPO
    ):
        pytest.skip("this venv was not set up by scripts/setup.sh for this checkout")
    done = subprocess.run(
        ["bash", "scripts/setup.sh"],
        capture_output=True, text=True, cwd=REPO, env={**env, "ORS_GYM_VENV": str(venv)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "skipping pip install" in done.stdout
    assert "Successfully installed" not in done.stdout + done.stderr
    assert stamp.read_text().strip() == wanted
