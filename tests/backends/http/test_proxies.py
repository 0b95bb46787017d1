"""Proxies and transports: the proxy variables as httpx honours them, and a transport
given to ``gym.make``/``OrsEnv``/``OrsVectorEnv``, through a real forward proxy
(``tests._fault_servers.ForwardProxy``) in front of a real SDK server."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import gymnasium as gym
import httpx
import pytest

import ors_gym  # noqa: F401 - registers the bundled envs
from ors_gym.backends.http import (
    EnvProxyTransport,
    HttpBackend,
    HttpOptions,
    PooledTransport,
    pooled_transport,
)
from ors_gym.env import OrsEnv
from ors_gym.envs import BUNDLED
from ors_gym.serving import ServerThread
from ors_gym.settings import EnvSettings
from ors_gym.vector import OrsVectorEnv
from tests._fault_servers import ForwardProxy

_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    with ServerThread([BUNDLED["Math"]]) as server:
        yield server


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[ForwardProxy]:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with ForwardProxy() as forward:
        yield forward


def _episode(env: gym.Env) -> None:  # type: ignore[type-arg]
    env.reset(seed=0)
    _, _, _, truncated, info = env.step({"tool_calls": [
        {"name": "submit", "arguments": {"answer": 0}}]})
    assert not truncated, info


def test_the_proxy_variables_are_honoured(
    srv: ServerThread, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    assert isinstance(pooled_transport(), EnvProxyTransport)
    env = gym.make("ors/Math-v0", base_url=srv.url)
    try:
        _episode(env)
    finally:
        env.close()
    urls = [url for _, url in proxy.seen]
    assert f"{srv.url}/math/call" in urls and f"{srv.url}/create" in urls
    assert ("POST", f"{srv.url}/delete") in proxy.seen  # every request went through it

    proxy.seen.clear()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # as httpx reads it: this host goes direct
    env = gym.make("ors/Math-v0", base_url=srv.url)
    try:
        _episode(env)
    finally:
        env.close()
    assert proxy.seen == []


def test_without_proxy_variables_the_own_pool_is_used(proxy: ForwardProxy) -> None:
    assert isinstance(pooled_transport(), PooledTransport)
    assert isinstance(pooled_transport(trust_env=False), PooledTransport)


def test_a_transport_reaches_every_env_and_every_face(
    srv: ServerThread, proxy: ForwardProxy,
) -> None:
    transport = httpx.AsyncHTTPTransport(proxy=proxy.url)
    env = gym.make("ors/Math-v0", base_url=srv.url, transport=transport)
    try:
        _episode(env)
    finally:
        env.close()
    made = len(proxy.seen)
    assert made > 3
    settings = EnvSettings.from_options({"backend_options": {"transport": transport}})
    assert settings.http.transport is transport
    with OrsEnv(base_url=srv.url, env_name="math", backend_options={"transport": transport}
                ) as again:
        _episode(again)
    assert len(proxy.seen) > made
    made = len(proxy.seen)
    vec = OrsVectorEnv(num_envs=2, base_url=srv.url, env_name="math", transport=transport)
    try:
        vec.reset(seed=0)
    finally:
        vec.close()
    assert len(proxy.seen) > made
    with HttpBackend(srv.url, transport=transport) as backend:
        assert backend.health()["status"] == "ok"
        copy = pickle.loads(pickle.dumps(backend))  # a transport stays in its process
        assert copy.options.transport is None
    assert ("GET", f"{srv.url}/health") in proxy.seen


def test_a_blocking_transport_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"transport must be an httpx.AsyncBaseTransport.*"
                                        r"HTTPTransport \(a blocking transport"):
        HttpOptions(transport=httpx.HTTPTransport())  # type: ignore[arg-type]
