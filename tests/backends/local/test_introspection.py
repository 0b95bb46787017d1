"""The cache ``LocalBackend`` puts on the SDK's per-call tool introspection.

It must answer exactly what the SDK's own ``_introspect_tool`` answers (bound
and plain functions, decorated tools, and what it raises), only inside
``LocalBackend`` calls (an SDK server in the same process keeps introspecting),
and never keep an environment instance alive.
"""

from __future__ import annotations

import contextvars
import functools
import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

import openreward.environments.environment as sdk_environment  # noqa: E402
import openreward.environments.session as sdk_session  # noqa: E402
from openreward.environments import Environment, TextBlock, ToolOutput, tool  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from ors_gym._compat import openreward as compat  # noqa: E402
from ors_gym.backends.http import HttpBackend  # noqa: E402
from ors_gym.backends.local import LocalBackend  # noqa: E402
from ors_gym.backends.local.sdk import load_sdk as _load_sdk  # noqa: E402
from ors_gym.serving import ServerThread  # noqa: E402

_load_sdk()
pytestmark = pytest.mark.skipif(
    not compat.introspection_cache_installed(),
    reason="this openreward SDK has no _introspect_tool; LocalBackend runs it uncached",
)


class Text(BaseModel):
    text: str


def _logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


class Introspected(Environment):
    """Tools of every shape the cache keys apart."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, Any]]:
        return [{"id": 0}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="go")]

    @tool
    async def plain(self, params: Text) -> ToolOutput:
        """An async tool."""
        return ToolOutput(blocks=[TextBlock(text=params.text)], reward=1.0)

    @tool
    @_logged
    def wrapped(self, params: Text) -> ToolOutput:
        """A sync tool behind a functools.wraps decorator (``inspect.unwrap`` follows it)."""
        return ToolOutput(blocks=[TextBlock(text=params.text.upper())])

    @tool
    def renamed(me, params: Text) -> ToolOutput:  # the first parameter is not "self"
        """Bound, its signature has one parameter; plain, two (only "self" is filtered)."""
        return ToolOutput(blocks=[TextBlock(text=params.text[::-1])])


class _CallableTool:
    """Marked as a tool, but not a function: the SDK cannot introspect it."""

    _env_tool = True

    def __call__(self, params: Text) -> ToolOutput:
        return ToolOutput(blocks=[TextBlock(text=params.text)])


@pytest.fixture
def original_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every call that reaches the SDK's own ``_introspect_tool``, by function."""
    original = compat._original
    assert original is not None
    seen: list[Any] = []

    def counted(fn: Any) -> Any:
        seen.append(fn)
        return original(fn)

    monkeypatch.setattr(compat, "_original", counted)
    yield seen


def _enabled(fn: Callable[[], Any]) -> Any:
    """``fn()`` in a fresh context with the cache switched on, as in a LocalBackend call."""

    def run() -> Any:
        compat.enable_introspection_cache()
        return fn()

    return contextvars.copy_context().run(run)


def test_the_hook_replaces_the_sdk_function_where_the_sdk_imports_it() -> None:
    assert compat.install_introspection_cache() is True  # idempotent
    assert sdk_environment._introspect_tool is compat._introspect_tool
    assert sdk_session._introspect_tool is compat._introspect_tool


def test_cached_answers_equal_the_sdk_functions_answers() -> None:
    original = compat._original
    assert original is not None
    env = Introspected(task_spec={"id": 0})
    candidates = [
        Introspected.plain, env.plain, Introspected.wrapped, env.wrapped,
        Introspected.renamed, env.renamed,
    ]
    for fn in candidates:
        expected = original(fn)
        first, second = _enabled(lambda fn=fn: (
            compat._introspect_tool(fn), compat._introspect_tool(fn)
        ))
        for got in (first, second):
            assert got[0] is expected[0] or got[0] == expected[0], fn
            assert got[1] == expected[1], fn
            assert got[2] == expected[2], fn
        assert second[1] is first[1], f"{fn} was introspected twice"
    # The bound method and the plain function have different parameter lists,
    # and the cache keeps them apart.
    bound = _enabled(lambda: compat._introspect_tool(env.renamed))
    plain = _enabled(lambda: compat._introspect_tool(Introspected.renamed))
    assert [p.name for p in bound[2]] == ["params"]
    assert [p.name for p in plain[2]] == ["me", "params"]
    assert Environment._is_tool(Introspected.renamed) is False  # as the SDK says, cached or not
    assert _enabled(lambda: Environment._is_tool(env.renamed)) is True


def test_what_the_sdk_function_raises_is_raised_and_not_cached() -> None:
    original = compat._original
    assert original is not None
    odd = _CallableTool()  # get_type_hints refuses callable objects
    with pytest.raises(TypeError) as expected:
        original(odd)
    for _ in range(2):
        with pytest.raises(TypeError) as got:
            _enabled(lambda: compat._introspect_tool(odd))
        assert str(got.value) == str(expected.value)


def test_local_calls_introspect_once_per_tool_and_the_server_every_call(
    original_calls: list[Any],
) -> None:
    with LocalBackend(Introspected) as backend:
        sid = backend.create_session("introspected", task_spec={"id": 0})
        for name in ("plain", "wrapped", "renamed", "plain", "wrapped", "renamed"):
            result = backend.call("introspected", sid, name, {"text": "abc"})
            assert result.ok, result
        first = len(original_calls)
        for name in ("plain", "wrapped", "renamed") * 5:
            assert backend.call("introspected", sid, name, {"text": "abc"}).ok
        assert len(original_calls) == first, "LocalBackend re-introspected a cached tool"
        invalid = backend.call("introspected", sid, "plain", {"wrong": 1})
        assert not invalid.ok and invalid.reason == "input_validation"

    with ServerThread([Introspected]) as server, HttpBackend(
        server.url, keepalive_interval=None
    ) as http:
        sid = http.create_session("introspected", task_spec={"id": 0})
        before = len(original_calls)
        for _ in range(3):
            assert http.call("introspected", sid, "plain", {"text": "abc"}).ok
        # The SDK's own server is left as it is: it introspects on each call.
        assert len(original_calls) - before >= 3


def test_the_cache_keeps_no_environment_instance_alive() -> None:
    with LocalBackend(Introspected) as backend:
        sid = backend.create_session("introspected", task_spec={"id": 0})
        instance = weakref.ref(backend.core._sessions[sid].env)
        for name in ("plain", "wrapped", "renamed"):
            assert backend.call("introspected", sid, name, {"text": "abc"}).ok
        backend.delete_session(sid)
    gc.collect()
    assert instance() is None
