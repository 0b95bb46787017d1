"""``scripts/setup.sh``: one light install for the main job, the rest for the tests.

It skips ``pip install`` when the venv already matches pyproject.toml and requirements/dev.lock
and holds the extra the job needs; the main job's extra carries no Ray, linters or test tools.
The lock names a version for every package the dev extra asks for, inside pyproject's range.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
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


def _stamp(venv: Path) -> list[str]:
    path = venv / ".ors-gym-setup.sha256"
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("job", ["train", "test"])
def test_setup_skips_pip_install_when_nothing_changed(job: str) -> None:
    venv = Path(sys.prefix)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wanted = hashlib.sha256(
        (REPO / "pyproject.toml").read_bytes() + (REPO / "requirements" / "dev.lock").read_bytes()
    ).hexdigest()
    before = _stamp(venv)
    if (
        not (venv / "bin" / "activate").exists()
        or before[:1] != [wanted]
        or before[1:] not in ([], ["dev"])
        or _installed_checkout(env) != REPO
    ):
        pytest.skip("this venv was not set up by scripts/setup.sh test for this checkout")
    done = subprocess.run(
        ["bash", "scripts/setup.sh", job],
        capture_output=True, text=True, cwd=REPO, env={**env, "ORS_GYM_VENV": str(venv)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "skipping pip install" in done.stdout  # dev covers train
    assert "Successfully installed" not in done.stdout + done.stderr
    assert _stamp(venv) == before
    if job == "train":
        assert "chromium" not in done.stdout + done.stderr  # no system package for the main job


def test_the_extras_were_installed_held_to_the_venvs_torch() -> None:
    """uv installed the extras under a constraint naming the torch already in the venv, so no
    package could pull another build of torch in."""
    from importlib.metadata import version

    held = Path(sys.prefix) / ".ors-gym-torch.txt"
    if not held.exists():
        pytest.skip("this venv was not set up by scripts/setup.sh with uv")
    assert held.read_text().split() == ["torch==" + version("torch").split("+")[0]]


def test_setup_refuses_an_unknown_job() -> None:
    done = subprocess.run(
        ["bash", "scripts/setup.sh", "everything"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )
    assert done.returncode == 2
    assert "unknown job 'everything'" in done.stderr and "'train'" in done.stderr


def _requirements(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """Every requirement name ``extra`` brings, through ``ors-gym[...]`` self-references."""
    names: set[str] = set()
    for req in extras[extra]:
        name, _, rest = req.partition("[")
        if name == "ors-gym":
            for inner in rest.rstrip("]").split(","):
                names |= _requirements(inner.strip(), extras)
        else:
            names.add(re.split(r"[<>=!~ ]", name, maxsplit=1)[0].lower())
    return names


def test_the_train_extra_is_light_and_dev_covers_it() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    train = _requirements("train", extras)
    assert {"openreward", "stable-baselines3"} <= train
    assert not train & {"ray", "ruff", "mypy", "pytest", "hypothesis", "jupyter"}
    assert train <= _requirements("dev", extras)
    assert "jupyter" in _requirements("notebooks", extras)
    train_sh = (REPO / "scripts" / "train.sh").read_text()
    assert "setup.sh train" in train_sh and "apt-get" not in train_sh


def _locked() -> dict[str, list[str]]:
    """requirements/dev.lock's pins: name -> the versions it names (one per marker it splits on)."""
    pins: dict[str, list[str]] = {}
    for line in (REPO / "requirements" / "dev.lock").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", line)
        if match:
            name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
            pins.setdefault(name, []).append(match.group(2))
    return pins


def _extra_requirements(extra: str, extras: dict[str, list[str]]) -> list[str]:
    """The requirement strings ``extra`` brings, through ``ors-gym[...]`` self-references."""
    found: list[str] = []
    for req in extras[extra]:
        if req.startswith("ors-gym["):
            for inner in req.partition("[")[2].rstrip("]").split(","):
                found += _extra_requirements(inner.strip(), extras)
        else:
            found.append(req)
    return found


def test_the_lock_covers_the_dev_extra_within_its_ranges() -> None:
    """A requirement added to pyproject.toml without ``bash scripts/lock.sh`` fails here."""
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = _locked()
    wanted = [*project["dependencies"],
              *_extra_requirements("dev", project["optional-dependencies"])]
    assert len(wanted) > 20
    for text in wanted:
        req = Requirement(text)
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{req.name} is not in requirements/dev.lock: run bash scripts/lock.sh"
        for version in pins[name]:
            assert req.specifier.contains(version, prereleases=True), (
                f"requirements/dev.lock has {req.name}=={version}, outside pyproject's {text!r}: "
                "run bash scripts/lock.sh"
            )
    assert pins["torch"] == ["2.13.0"]  # held at the build setup.sh installs first


def test_setup_installs_from_the_lock_and_lock_sh_writes_it() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert setup.count('--constraint "$LOCK"') == 2  # with uv and with pip
    assert "--no-install-recommends chromium" in setup
    header = (REPO / "requirements" / "dev.lock").read_text().splitlines()[:2]
    assert "bash scripts/lock.sh" in header[1]
    assert "site/" in (REPO / ".gitignore").read_text().splitlines()
