"""The python of an agent SDK's venv of its own (scripts/harness-venv.sh,
scripts/smolagents-venv.sh), which tests run client or harness scripts with; a failure
saying how to build it when it is missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: name -> (the variable naming its folder, what it holds that the main venv cannot)
_VENVS = {
    "harness": ("ORS_GYM_HARNESS_VENV", "openai-agents and pydantic-ai, whose pins the main "
                                        "venv cannot hold"),
    "smolagents": ("ORS_GYM_SMOLAGENTS_VENV", "smolagents, whose MCP adapter needs mcp 1.x"),
}


def client_python(name: str) -> str:
    """``bin/python`` of the ``name`` venv (``$ORS_GYM_<NAME>_VENV``, else ``.<name>-venv``
    in the checkout)."""
    variable, holds = _VENVS[name]
    venv = Path(os.environ.get(variable) or ROOT / f".{name}-venv")
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"no {name} venv at {venv}: build it with `bash scripts/{name}-venv.sh` "
                    f"(it holds {holds})")
    return str(python)
