"""Fixtures shared by the packages that play agents through a served gateway (imported by
their ``conftest.py``, so each package gets its own): a tiny Qwen3 tokenizer, a stand-in
token backend (vLLM and SGLang shapes) whose script each test sets, and a gateway over it
served by uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


class Script:
    """The backend's script, replaced per test (``script.use(fn)``)."""

    def __init__(self) -> None:
        self.fn: Any = None

    def use(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, prompt_ids: list[int], text: str) -> Any:
        assert self.fn is not None, "the test set no script"
        return self.fn(prompt_ids, text)


@pytest.fixture(scope="package")
def tok() -> Any:
    from tests._tiny_lm import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="package")
def backend(tok: Any) -> Iterator[Any]:
    from tests._token_server import TokenServer

    with TokenServer(tok, Script()) as server:
        yield server


@pytest.fixture
def script(backend: Any) -> Script:
    """The backend's script, cleared, and the backend's records (requests, peak in flight)
    cleared."""
    backend.script.use(None)
    backend.requests.clear()
    backend.max_in_flight = backend.in_flight  # the most held at once, counted from here
    backend.gate.set()
    return backend.script  # type: ignore[no-any-return]


@pytest.fixture(scope="package")
def gateway(tok: Any, backend: Any) -> Iterator[Any]:
    from ors_gym.gateway import Gateway, GatewayThread
    from ors_gym.sampling import VllmCompletions

    gw = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny")
    with GatewayThread(gw):
        yield gw
