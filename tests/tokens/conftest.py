"""Fixtures the token tests share: the tiny tokenizer, and the Latency test environment
reached over HTTP or in this process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ors_gym.envs.testing import Latency, register_test_envs
from ors_gym.serving import ServerThread


@pytest.fixture(scope="module")
def tok() -> Any:
    from _tiny_lm import tiny_tokenizer  # transformers: a module that needs it skips first

    return tiny_tokenizer()


@pytest.fixture(scope="module")
def latency_url() -> Iterator[str]:
    with ServerThread([Latency]) as srv:
        yield srv.url


@pytest.fixture(params=["http", "local"])
def latency(request: pytest.FixtureRequest, latency_url: str) -> dict[str, Any]:
    """``make`` arguments reaching ``ors/Latency-v0`` over HTTP, or in this process."""
    register_test_envs()
    return {"base_url": latency_url} if request.param == "http" else {}
