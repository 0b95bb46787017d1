"""The harness runner's tests share, per package: a tiny Qwen3 tokenizer, a stand-in token
backend whose script each test sets, a gateway over it served by uvicorn, and the harness
venv's python (the Python SDK harnesses need mcp 2.x, which the main venv cannot hold)."""

from __future__ import annotations

import importlib.util

import pytest

from tests._client_venvs import client_python

_NEEDS = ("transformers", "trl", "openai", "starlette", "uvicorn", "mcp")
if any(importlib.util.find_spec(m) is None for m in _NEEDS):
    pytest.skip(f"needs {', '.join(_NEEDS)} (the dev extras)", allow_module_level=True)

from tests._gateway_fixtures import backend, gateway, script, tok  # noqa: E402,F401


@pytest.fixture(scope="package")
def harness_python() -> str:
    return client_python("harness")


@pytest.fixture(scope="package")
def smolagents_python() -> str:
    return client_python("smolagents")
