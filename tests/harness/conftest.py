"""The harness runner's tests share, per package: a tiny Qwen3 tokenizer, a stand-in token
backend whose script each test sets, a gateway over it served by uvicorn, and the harness
venv's python (the Python SDK harnesses need mcp 2.x, which the main venv cannot hold)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from tests._client_venvs import client_python

_NEEDS = ("transformers", "trl", "openai", "starlette", "uvicorn", "mcp")
if any(importlib.util.find_spec(m) is None for m in _NEEDS):
    pytest.skip(f"needs {', '.join(_NEEDS)} (the dev extras)", allow_module_level=True)

@pytest.fixture(scope="package")
def tok() -> Any:
    from _tiny_lm import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="package")
def backend(tok: Any) -> Iterator[Any]:
    from tests._token_server import TokenServer
    from tests.gateway.conftest import Script

    with TokenServer(tok, Script()) as server:
        yield server


@pytest.fixture
def script(backend: Any) -> Any:
    """The backend's script, cleared, and its records cleared."""
    backend.script.use(None)
    backend.requests.clear()
    backend.gate.set()
    return backend.script


@pytest.fixture(scope="package")
def gateway(tok: Any, backend: Any) -> Iterator[Any]:
    from ors_gym.gateway import Gateway, GatewayThread
    from ors_gym.sampling import VllmCompletions

    gw = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny")
    with GatewayThread(gw):
        yield gw


@pytest.fixture(scope="package")
def harness_python() -> str:
    return client_python("harness")


@pytest.fixture(scope="package")
def smolagents_python() -> str:
    return client_python("smolagents")
