"""Other libraries' private names, as ``ors_gym._compat`` uses them.

For each touch point: the private name is there, shaped as used, for the
installed version (these fail loudly when a library changes it); the public
fallback gives the same answer as the private path; the fallback is logged
once at DEBUG. And an SDK ``Server`` in a process where ors_gym has hooked
the SDK answers byte for byte as one in a process that never imported ors_gym.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import logging
import os
import re
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

import httpx  # noqa: E402
import openreward.environments.environment as sdk_environment  # noqa: E402
import openreward.environments.session as sdk_session  # noqa: E402
import openreward.log_utils as sdk_log_utils  # noqa: E402
import structlog  # noqa: E402
from gymnasium.vector import VectorEnv  # noqa: E402
from openreward.environments import Environment, TextBlock, ToolOutput, tool  # noqa: E402
from pydantic import BaseModel  # noqa: E402

import ors_gym  # noqa: E402
from ors_gym import protocol  # noqa: E402
from ors_gym._compat import _versions  # noqa: E402
from ors_gym._compat import asyncio as compat_asyncio  # noqa: E402
from ors_gym._compat import gymnasium as compat_gymnasium  # noqa: E402
from ors_gym._compat import httpcore as compat_httpcore  # noqa: E402
from ors_gym._compat import openreward as compat_openreward  # noqa: E402
from ors_gym._compat import pydantic as compat_pydantic  # noqa: E402
from ors_gym._compat import re as compat_re  # noqa: E402
from ors_gym._compat import renderers as compat_renderers  # noqa: E402
from ors_gym._compat import sse_starlette as compat_sse  # noqa: E402
from ors_gym._compat import structlog as compat_structlog  # noqa: E402
from ors_gym.backends.local.sdk import load_sdk as _load_sdk  # noqa: E402

_load_sdk()  # imports the SDK as LocalBackend does, and installs the introspection cache


class Text(BaseModel):
    text: str


@pytest.fixture
def fallback_log(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> Iterator[Callable[[], list[str]]]:
    """The fallback notes logged from here on (the once-only memory starts empty)."""
    monkeypatch.setattr(_versions, "_noted", set())
    caplog.set_level(logging.DEBUG, logger="ors_gym")

    def notes() -> list[str]:
        return [
            r.getMessage() for r in caplog.records
            if r.levelno == logging.DEBUG and "taking the public path" in r.getMessage()
        ]

    yield notes


def _outside(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType) -> None:
    """Make ``module`` see its library outside its verified range."""
    monkeypatch.setattr(module, "within", lambda *args: False)


# -- versions ------------------------------------------------------------------------------


def test_release_numbers_are_read_from_version_strings() -> None:
    assert _versions.release("2.3.6") == (2, 3, 6)
    assert _versions.release("1.4.0rc1") == (1, 4, 0)
    assert _versions.release("26.1") == (26, 1)
    assert _versions.release("0.1.167.post2") == (0, 1, 167)
    assert _versions.release("unknown") == ()
    assert _versions.version_of("surely-not-an-installed-distribution") is None
    assert not _versions.within("surely-not-an-installed-distribution", (0,), (99,))


@pytest.mark.parametrize(
    ("distribution", "verified"),
    [
        ("openreward", compat_openreward.VERIFIED),
        ("structlog", compat_structlog.VERIFIED),
        ("pydantic", compat_pydantic.VERIFIED),
        ("gymnasium", compat_gymnasium.VERIFIED),
        ("httpcore", compat_httpcore.VERIFIED),
        ("renderers", compat_renderers.VERIFIED),
    ],
)
def test_installed_libraries_are_inside_their_verified_ranges(
    distribution: str, verified: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    version = _versions.version_of(distribution)
    assert _versions.within(distribution, *verified), (
        f"{distribution} {version} is outside the range {verified} ors_gym._compat verified "
        "its private names on, so the public fallback is being taken: run this file, check "
        f"the private names still behave as tested here, then widen VERIFIED in "
        f"ors_gym/_compat/{distribution}.py"
    )


def test_python_is_inside_the_range_asyncio_was_verified_on() -> None:
    low, below = compat_asyncio.VERIFIED
    assert low <= sys.version_info[:2] < below, (
        f"Python {sys.version_info[:2]} is outside {compat_asyncio.VERIFIED}: check "
        "asyncio._get_running_loop/_set_running_loop and widen ors_gym/_compat/asyncio.py"
    )
    assert compat_asyncio._PRIVATE


def test_sse_starlette_is_patched_inside_its_range_or_needs_no_patch() -> None:
    version = _versions.version_of("sse-starlette")
    assert version is not None
    if version >= compat_sse.VERIFIED[1]:
        assert compat_sse.exit_listener_per_loop() is False
        return
    assert _versions.within("sse-starlette", *compat_sse.VERIFIED), (
        f"sse-starlette {version} is outside {compat_sse.VERIFIED}: SSE from a second "
        "server in one process is broken; check _listen_for_exit_signal and widen "
        "VERIFIED in ors_gym/_compat/sse_starlette.py"
    )
    assert compat_sse.exit_listener_per_loop() is True


def test_a_fallback_is_logged_once_at_debug(
    fallback_log: Callable[[], list[str]],
) -> None:
    _versions.note_fallback("some private name", "gone")
    _versions.note_fallback("some private name", "gone")
    _versions.note_fallback("another private name", "gone")
    assert fallback_log() == [
        "some private name: gone; taking the public path",
        "another private name: gone; taking the public path",
    ]


def test_compat_modules_named_after_libraries_do_not_shadow_them() -> None:
    import importlib

    import pydantic

    here = str(Path(compat_asyncio.__file__).resolve().parent)
    for name in ("asyncio", "gymnasium", "httpcore", "openreward", "pydantic", "re",
                 "sse_starlette", "structlog"):
        module = importlib.import_module(name)
        assert module.__file__ is not None and not module.__file__.startswith(here), name
    assert compat_asyncio.asyncio is asyncio
    assert compat_pydantic.BaseModel is pydantic.BaseModel


# -- openreward: the introspection cache -------------------------------------------------


def test_the_sdk_introspects_through_the_module_global_the_cache_replaces() -> None:
    assert compat_openreward.introspection_cache_installed()
    original = compat_openreward._original
    assert original is not None
    assert original.__module__ == "openreward.environments.environment"
    assert original.__name__ == "_introspect_tool"
    assert list(inspect.signature(original).parameters) == ["fn"]
    # Both SDK modules call it by its module-global name: the name the hook replaces.
    for module in (sdk_environment, sdk_session):
        assert "_introspect_tool(fn)" in inspect.getsource(module), module.__name__
        assert module._introspect_tool is compat_openreward._introspect_tool

    class Probe(Environment):
        @tool
        def echo(self, params: Text) -> ToolOutput:
            return ToolOutput(blocks=[TextBlock(text=params.text)])

    real, hints, params = original(Probe.echo)
    assert inspect.unwrap(Probe.echo) is real
    assert hints["params"] is Text
    assert [p.name for p in params] == ["params"]


def test_outside_its_range_the_introspection_cache_is_not_installed(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]]
) -> None:
    _outside(monkeypatch, compat_openreward)
    monkeypatch.setattr(compat_openreward, "_original", None)
    assert compat_openreward.install_introspection_cache() is False
    assert compat_openreward.install_introspection_cache() is False
    assert not compat_openreward.introspection_cache_installed()
    assert len(fallback_log()) == 1 and "tool calls run uncached" in fallback_log()[0]


# -- openreward: log level and loggers -----------------------------------------------------


@pytest.mark.parametrize(
    ("openreward_level", "log_level"),
    [(None, None), ("error", None), ("DEBUG", "ERROR"), (None, "warning"), ("loud", None),
     ("", "critical")],
)
def test_the_sdk_log_level_is_read_as_the_sdk_reads_it(
    monkeypatch: pytest.MonkeyPatch, openreward_level: str | None, log_level: str | None
) -> None:
    assert list(inspect.signature(sdk_log_utils._resolve_log_level).parameters) == []
    for name, value in (("OPENREWARD_LOG_LEVEL", openreward_level), ("LOG_LEVEL", log_level)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    expected = sdk_log_utils._resolve_log_level()
    assert compat_openreward._sdk_log_level() == expected
    assert compat_openreward._log_level_from_environment() == expected


def test_structlog_keeps_what_a_logger_is_rebuilt_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENREWARD_LOG_LEVEL", "INFO")
    logger = sdk_log_utils.get_logger("probe")  # as the SDK makes its module loggers
    assert list(inspect.signature(structlog.BoundLoggerBase.__init__).parameters) == [
        "self", "logger", "processors", "context",
    ]
    assert compat_structlog.is_filtering_logger(logger)
    assert logger.get_effective_level() == logging.INFO
    assert structlog.get_context(logger) is logger._context
    quiet = compat_structlog.refiltered(logger, logging.ERROR)
    assert quiet is not None and compat_structlog.is_filtering_logger(quiet)
    assert quiet.get_effective_level() == logging.ERROR
    assert quiet._logger is logger._logger
    assert quiet._processors is logger._processors
    assert quiet._context == logger._context
    assert compat_structlog.refiltered(object(), logging.ERROR) is None


def _probe_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """An ``openreward.*`` module holding loggers made at INFO and at CRITICAL, and a proxy."""
    module = types.ModuleType("openreward._ors_gym_compat_probe")
    monkeypatch.setenv("OPENREWARD_LOG_LEVEL", "INFO")
    module.info = sdk_log_utils.get_logger("info")  # type: ignore[attr-defined]
    monkeypatch.setenv("OPENREWARD_LOG_LEVEL", "CRITICAL")
    module.critical = sdk_log_utils.get_logger("critical")  # type: ignore[attr-defined]
    module.proxy = structlog.get_logger("proxy")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_loaded_sdk_loggers_are_only_ever_made_quieter(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _probe_module(monkeypatch)
    info, critical, proxy = module.info, module.critical, module.proxy
    monkeypatch.setenv("OPENREWARD_LOG_LEVEL", "ERROR")
    compat_openreward.quiet_loaded_sdk_loggers()
    assert module.info is not info and module.info.get_effective_level() == logging.ERROR
    assert module.info._processors is info._processors
    assert module.critical is critical  # quieter already: left as it is
    assert module.proxy is proxy  # not a built filtering logger


def test_outside_its_range_structlog_loggers_are_left_alone(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]]
) -> None:
    module = _probe_module(monkeypatch)
    info = module.info
    _outside(monkeypatch, compat_structlog)
    monkeypatch.setenv("OPENREWARD_LOG_LEVEL", "ERROR")
    compat_openreward.quiet_loaded_sdk_loggers()
    compat_openreward.quiet_loaded_sdk_loggers()
    assert module.info is info
    assert len(fallback_log()) == 1 and "structlog" in fallback_log()[0]


def test_outside_its_range_the_log_level_is_read_here(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]]
) -> None:
    _outside(monkeypatch, compat_openreward)
    monkeypatch.setenv("OPENREWARD_LOG_LEVEL", "warning")
    assert compat_openreward._sdk_log_level() == logging.WARNING
    assert len(fallback_log()) == 1


# -- openreward: Environment classmethods --------------------------------------------------


def _environment(splits: list[Any], score: bool) -> tuple[type, list[int]]:
    """A fresh Environment class (no split cache yet) and its list_splits() call count."""
    calls: list[int] = []

    class Fresh(Environment):
        @classmethod
        def list_splits(cls) -> list[Any]:
            calls.append(1)
            return list(splits)

        @classmethod
        def list_tasks(cls, split: str) -> list[dict[str, Any]]:
            return [{"id": 0}]

        def get_prompt(self) -> list[TextBlock]:
            return [TextBlock(text="go")]

        @tool
        def noop(self, params: Text) -> ToolOutput:
            return ToolOutput(blocks=[])

    if score:

        class Scored(Fresh):
            async def score_group(self, candidates: Any) -> list[float]:
                return [0.0 for _ in candidates]

        return Scored, calls
    return Fresh, calls


def test_list_splits_is_the_sdks_cached_list() -> None:
    assert list(inspect.signature(Environment._list_splits_cached).parameters) == []
    split = protocol.Split(name="dev", type="validation")
    cls, calls = _environment(["train", "test"], score=False)
    first = compat_openreward.list_splits(cls)
    assert list(first) == ["train", "test"] == list(cls.list_splits())
    assert compat_openreward.list_splits(cls) is first  # cached on the class
    assert first is cls._list_splits_cached()
    assert len(calls) == 2  # the cached call, and the direct one above
    cls, _ = _environment([split], score=False)
    assert list(compat_openreward.list_splits(cls)) == [split]


def test_outside_its_range_list_splits_calls_list_splits(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]]
) -> None:
    cls, calls = _environment(["train"], score=False)
    private = list(compat_openreward.list_splits(cls))
    _outside(monkeypatch, compat_openreward)
    assert list(compat_openreward.list_splits(cls)) == private
    assert list(compat_openreward.list_splits(cls)) == private
    assert len(calls) == 3
    assert len(fallback_log()) == 1


def test_supports_score_group_follows_the_sdk(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]]
) -> None:
    assert list(inspect.signature(Environment._supports_score_group).parameters) == []
    plain, _ = _environment(["train"], score=False)
    scored, _ = _environment(["train"], score=True)
    private = [compat_openreward.supports_score_group(c) for c in (plain, scored)]
    assert private == [plain._supports_score_group(), scored._supports_score_group()]
    assert private == [False, True]
    _outside(monkeypatch, compat_openreward)
    assert [compat_openreward.supports_score_group(c) for c in (plain, scored)] == private
    assert len(fallback_log()) == 1


# -- asyncio ---------------------------------------------------------------------------------


def test_the_running_loop_is_read_by_the_private_function_and_agrees_with_the_public() -> None:
    assert compat_asyncio.get_running_loop_or_none is asyncio._get_running_loop

    async def inside() -> tuple[Any, Any, Any]:
        return (
            asyncio.get_running_loop(),
            compat_asyncio.get_running_loop_or_none(),
            compat_asyncio._public_get_running_loop(),
        )

    running, private, public = asyncio.run(inside())
    assert running is private is public
    assert compat_asyncio.get_running_loop_or_none() is None
    assert compat_asyncio._public_get_running_loop() is None


def test_running_loop_set_aside_lets_a_second_loop_run_and_restores_the_mark() -> None:
    with compat_asyncio.running_loop_set_aside() as outer:
        assert outer is None  # nothing running: nothing touched

    async def inside() -> None:
        running = asyncio.get_running_loop()
        with compat_asyncio.running_loop_set_aside() as outer:
            assert outer is running
            assert asyncio._get_running_loop() is None
            second = asyncio.new_event_loop()
            try:
                assert second.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
            finally:
                second.close()
        assert asyncio._get_running_loop() is running
        with pytest.raises(KeyError), compat_asyncio.running_loop_set_aside():
            raise KeyError("restored on the way out of an error too")
        assert asyncio._get_running_loop() is running

    asyncio.run(inside())


def test_without_the_private_functions_a_running_loop_cannot_be_set_aside(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]]
) -> None:
    monkeypatch.setattr(compat_asyncio, "_PRIVATE", False)
    monkeypatch.setattr(
        compat_asyncio, "get_running_loop_or_none", compat_asyncio._public_get_running_loop
    )
    with compat_asyncio.running_loop_set_aside() as outer:
        assert outer is None

    async def inside() -> None:
        with pytest.raises(RuntimeError, match=r"asyncio\.to_thread"), \
                compat_asyncio.running_loop_set_aside():
            pass

    asyncio.run(inside())
    assert [n.split(":")[0] for n in fallback_log()] == [
        "asyncio._get_running_loop", "asyncio._set_running_loop",
    ]


# -- re: the regex parser ------------------------------------------------------------------


def test_python_is_inside_the_range_the_regex_parser_was_verified_on() -> None:
    low, below = compat_re.VERIFIED
    assert low <= sys.version_info[:2] < below, (
        f"Python {sys.version_info[:2]} is outside {compat_re.VERIFIED}: check re._parser's "
        "parse() and tree shape, then widen ors_gym/_compat/re.py"
    )
    assert compat_re._PARSER is not None


def test_the_parse_tree_has_the_shape_the_sampler_walks() -> None:
    tree = compat_re.parse_tree(r"^(cat|dog)[0-9]{2}x*$")
    assert tree is not None
    ops = [str(op) for op, _ in tree]
    assert ops == ["AT", "SUBPATTERN", "MAX_REPEAT", "MAX_REPEAT", "AT"]
    group, _, _, branch = tree[1][1]  # the SUBPATTERN: (group, add flags, del flags, body)
    assert group == 1 and str(branch[0][0]) == "BRANCH"
    with pytest.raises(re.error):
        compat_re.parse_tree("(unclosed")


def test_outside_its_range_patterns_draw_only_from_default_and_examples(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]],
) -> None:
    import numpy as np

    from ors_gym.schema.regex import pattern_sampler
    from ors_gym.schema.resolve import SchemaError

    monkeypatch.setattr(compat_re, "_PARSER", None)
    schema = {"pattern": "^[a-z]{3}$", "examples": ["abc", "TOO LONG", "xyz"]}
    sample = pattern_sampler("^[a-z]{3}$", 0, 10, schema)
    rng = np.random.default_rng(0)
    assert {sample(rng, 0) for _ in range(50)} == {"abc", "xyz"}
    with pytest.raises(SchemaError, match="'default' or 'examples'"):
        pattern_sampler("^[a-z]{3}$", 0, 10, {})
    assert len(fallback_log()) == 1 and "re._parser" in fallback_log()[0]


# -- pydantic ------------------------------------------------------------------------------

_TEXT = {"type": "text", "text": "hi", "detail": {"k": [1, 2]}}
_IMAGE = {"type": "image", "data": "aGk=", "mimeType": "image/jpeg", "detail": None}


def _protocol_cases() -> list[tuple[type[BaseModel], dict[str, Any]]]:
    """Protocol models and complete field values, as ``LocalBackend`` builds them."""
    text = compat_pydantic.build_unvalidated(protocol.TextBlock, dict(_TEXT))
    output = {"blocks": [text], "metadata": {"n": 1}, "reward": 0.5, "finished": True}
    return [
        (protocol.TextBlock, dict(_TEXT)),
        (protocol.ImageBlock, dict(_IMAGE)),
        (protocol.ToolOutput, output),
        (protocol.RunToolSuccess, {"ok": True, "output": protocol.ToolOutput(**output)}),
        (protocol.RunToolError, {"ok": False, "error": "bad", "reason": "input_validation"}),
    ]


def _same_model(got: BaseModel, validated: BaseModel) -> None:
    assert type(got) is type(validated)
    assert got == validated
    assert got.model_fields_set == validated.model_fields_set == set(type(got).model_fields)
    assert got.__pydantic_extra__ == validated.__pydantic_extra__
    assert got.__pydantic_private__ == validated.__pydantic_private__
    assert got.model_dump_json() == validated.model_dump_json()


def test_pydantic_models_are_the_four_slots_filled_here() -> None:
    assert BaseModel.__slots__ == compat_pydantic._SLOTS
    assert compat_pydantic._PRIVATE
    for cls, data in _protocol_cases():
        got = compat_pydantic.build_unvalidated(cls, data)
        assert got.__dict__ is data
        _same_model(got, cls.model_validate(dict(data)))
        _same_model(cls.model_construct(_fields_set=set(cls.model_fields), **data), got)


def test_outside_its_range_models_are_built_by_model_construct(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]]
) -> None:
    private = [compat_pydantic.build_unvalidated(c, d) for c, d in _protocol_cases()]
    monkeypatch.setattr(compat_pydantic, "_PRIVATE", False)
    for (cls, data), expected in zip(_protocol_cases(), private, strict=True):
        got = compat_pydantic.build_unvalidated(cls, data)
        _same_model(got, expected)
        _same_model(got, cls.model_validate(dict(data)))
    assert len(fallback_log()) == 1


# -- gymnasium -----------------------------------------------------------------------------

_N = 3
_INFO_CASES: list[tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]] = [
    ({}, [(0, {"a": 1, "b": 0.5, "c": True, "s": "x"})]),
    ({}, [(0, {"a": 1}), (2, {"a": 3, "s": "y"}), (1, {})]),
    ({}, [(1, {"arr": np.arange(3, dtype=np.float32)}), (0, {"arr": np.ones(3, np.float32)})]),
    ({}, [(0, {"n": np.int64(4), "f": np.float32(1.5)}), (2, {"n": np.int64(5)})]),
    ({}, [(0, {"nested": {"x": 1, "deeper": {"y": "z"}}}), (1, {"nested": {"x": 2}})]),
    ({}, [(0, {"final_obs": {"text": "a"}, "final_info": {"r": 1.0}}),
          (2, {"final_obs": None, "final_info": {"r": 0.0, "k": "v"}})]),
    ({}, [(0, {"none": None, "lst": [1, 2]}), (1, {"none": None, "lst": []})]),
    ({"k": np.full(_N, None, dtype=object), "_k": np.zeros(_N, dtype=np.bool_)},
     [(0, {"k": 2}), (1, {"k": None}), (2, {"k": "three"})]),
]


def _assert_same_infos(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert list(got) == list(expected)
    for key, value in expected.items():
        if isinstance(value, dict):
            _assert_same_infos(got[key], value)
            continue
        assert isinstance(got[key], np.ndarray), key
        assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
        np.testing.assert_equal(got[key], value)


def test_vector_env_add_info_is_the_method_used() -> None:
    assert list(inspect.signature(VectorEnv._add_info).parameters) == [
        "self", "vector_infos", "env_info", "env_num",
    ]
    assert compat_gymnasium._Batch._add_info is VectorEnv._add_info


@pytest.mark.parametrize(("start", "infos"), _INFO_CASES)
def test_add_info_batches_as_gymnasium_and_its_copy_agrees(
    start: dict[str, Any], infos: list[tuple[int, dict[str, Any]]]
) -> None:
    private: dict[str, Any] = copy.deepcopy(start)
    public: dict[str, Any] = copy.deepcopy(start)
    for position, info in infos:
        private = compat_gymnasium.add_info(private, copy.deepcopy(info), position, _N)
        public = compat_gymnasium._add_info(public, copy.deepcopy(info), position, _N)
    _assert_same_infos(public, private)
    # And what a gymnasium vector env of _N sub-envs makes of the same infos.
    holder = types.SimpleNamespace(num_envs=_N)
    holder._add_info = lambda *args: VectorEnv._add_info(holder, *args)
    gym: dict[str, Any] = copy.deepcopy(start)
    for position, info in infos:
        gym = VectorEnv._add_info(holder, gym, copy.deepcopy(info), position)  # type: ignore[arg-type]
    _assert_same_infos(private, gym)


def test_outside_its_range_infos_are_batched_by_the_copy(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]]
) -> None:
    start, infos = _INFO_CASES[5]
    private: dict[str, Any] = copy.deepcopy(start)
    for position, info in infos:
        private = compat_gymnasium.add_info(private, copy.deepcopy(info), position, _N)
    monkeypatch.setattr(compat_gymnasium._Batch, "_add_info", None)
    public: dict[str, Any] = copy.deepcopy(start)
    for position, info in infos:
        public = compat_gymnasium.add_info(public, copy.deepcopy(info), position, _N)
    _assert_same_infos(public, private)
    assert len(fallback_log()) == 1


# -- sse-starlette -------------------------------------------------------------------------


def test_the_sse_exit_listener_replaced_is_a_staticmethod_its_response_starts() -> None:
    from sse_starlette import sse

    if _versions.version_of("sse-starlette") >= compat_sse.VERIFIED[1]:  # type: ignore[operator]
        pytest.skip("sse-starlette 3 needs no patch")
    assert compat_sse.exit_listener_per_loop() is True
    listener = sse.EventSourceResponse.__dict__["_listen_for_exit_signal"]
    assert isinstance(listener, staticmethod)
    assert list(inspect.signature(listener.__func__).parameters) == []
    assert "self._listen_for_exit_signal" in inspect.getsource(sse.EventSourceResponse.__call__)
    assert isinstance(sse.AppStatus.should_exit, bool)


def test_the_patched_sse_exit_listener_returns_once_the_exit_flag_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import anyio
    from sse_starlette import sse

    if not compat_sse.exit_listener_per_loop():
        pytest.skip("sse-starlette is not patched")
    monkeypatch.setattr(compat_sse, "POLL_SECONDS", 0.001)
    listener = sse.EventSourceResponse._listen_for_exit_signal

    async def run() -> bool:
        with anyio.move_on_after(0.05):
            await listener()
            return True
        monkeypatch.setattr(sse.AppStatus, "should_exit", True)
        with anyio.fail_after(5):
            await listener()
        return False

    assert anyio.run(run) is False  # waited while the flag was down, returned once it was up


def test_two_servers_in_one_process_both_stream_sse() -> None:
    from ors_gym.backends.http import HttpBackend
    from ors_gym.serving import ServerThread

    class Streamed(Environment):
        @classmethod
        def list_splits(cls) -> list[str]:
            return ["train"]

        @classmethod
        def list_tasks(cls, split: str) -> list[dict[str, Any]]:
            return [{"id": 0}]

        def get_prompt(self) -> list[TextBlock]:
            return [TextBlock(text="go")]

        @tool
        async def echo(self, params: Text) -> ToolOutput:
            return ToolOutput(blocks=[TextBlock(text=params.text)])

    with ServerThread([Streamed]) as first, ServerThread([Streamed]) as second:
        for server in (first, second, first):
            with HttpBackend(server.url, keepalive_interval=None) as http:
                sid = http.create_session("streamed", task_spec={"id": 0})
                assert http.call("streamed", sid, "echo", {"text": "x"}).ok


# -- an SDK Server next to ors_gym answers as one without it -----------------------------

_SERVER_SCRIPT = r'''
import json, os, socket, sys, threading

from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel


class Params(BaseModel):
    text: str


class Parity(Environment):
    @classmethod
    def list_splits(cls):
        return ["train", "test"]

    @classmethod
    def list_tasks(cls, split):
        return [{"id": 0, "word": "abc"}, {"id": 1, "word": "xyz"}]

    def get_prompt(self):
        return [TextBlock(text="say " + self.task_spec["word"])]

    @tool
    async def echo(self, params: Params) -> ToolOutput:
        """Echo the text back."""
        return ToolOutput(blocks=[TextBlock(text=params.text)], metadata={"n": 1}, reward=0.5)

    @tool
    def shout(self, params: Params) -> ToolOutput:
        """Upper-case the text (a sync tool)."""
        return ToolOutput(blocks=[TextBlock(text=params.text.upper())])

    @tool
    async def answer(self, params: Params) -> ToolOutput:
        """Answer; ends the episode."""
        right = params.text == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text=str(right))], reward=float(right), finished=True)

    async def score_group(self, candidates):
        return [float(len(c.messages)) for c in candidates]


def hooked():
    import openreward.environments.session as session
    return session._introspect_tool.__module__


if sys.argv[1] == "ors_gym":
    from ors_gym.backends.local import LocalBackend
    from ors_gym.serving import ServerThread

    with LocalBackend(Parity) as local:  # installs the hook and fills its cache
        sid = local.create_session("parity", split="train", index=1)
        for name, arguments in [("echo", {"text": "hi"}), ("shout", {"text": "hi"}),
                                ("echo", {"wrong": 1}), ("answer", {"text": "xyz"})]:
            local.call("parity", sid, name, arguments)
        local.task_tools("parity", sid)
    server = ServerThread([Parity]).start()
    url, stop = server.url, server.stop
else:
    import uvicorn
    from openreward.environments import Server

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue until uvicorn serves them
    config = uvicorn.Config(Server([Parity]).app, log_level="warning", access_log=False,
                            lifespan="on", timeout_keep_alive=60)
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = "http://127.0.0.1:%d" % sock.getsockname()[1]

    def stop():
        uv.should_exit = True
        thread.join(30)

imported = sorted(m for m in sys.modules if m == "ors_gym" or m.startswith("ors_gym."))
print(json.dumps({"url": url, "ors_gym": bool(imported), "hooked": hooked()}), flush=True)
sys.stdin.read()  # until the test closes it
stop()
'''

#: Session and task ids, with dashes or without.
_UUID = re.compile(rb"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")


def _start_server(mode: str) -> subprocess.Popen[str]:
    """The server script in a fresh interpreter; it prints where it listens, then serves."""
    root = str(Path(ors_gym.__file__).resolve().parent.parent)
    env = dict(os.environ, OPENREWARD_DISABLE_UPDATE_CHECK="1", OPENREWARD_LOG_LEVEL="ERROR")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", _SERVER_SCRIPT, mode], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root,
    )


def _started(proc: subprocess.Popen[str], mode: str) -> dict[str, Any]:
    """What the script reports once listening: url, whether ors_gym is imported, the hook."""
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(30)
        raise AssertionError(f"the {mode} server did not start: {proc.stderr.read()}")
    return json.loads(line)  # type: ignore[no-any-return]


def _stop_server(proc: subprocess.Popen[str]) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _episode(url: str) -> list[tuple[str, int, str, bytes]]:
    """A fixed episode against the SDK server: (step, status, content type, body)."""
    answers: list[tuple[str, int, str, bytes]] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for tries_left in range(2, -1, -1):  # listening already: a try waits for the server
            try:
                assert client.get("/health").status_code == 200
                break
            except httpx.TransportError:
                if not tries_left:
                    raise

        def record(step: str, response: httpx.Response) -> bytes:
            body = response.read()
            answers.append((step, response.status_code,
                            response.headers.get("content-type", ""), _UUID.sub(b"<id>", body)))
            return body

        record("list_environments", client.get("/list_environments"))
        record("tools", client.get("/parity/tools"))
        record("splits", client.get("/parity/splits"))
        record("tasks", client.post("/parity/tasks", json={"split": "train"}))
        record("tasks of an unknown split", client.post("/parity/tasks", json={"split": "x"}))
        opened = record("create_session", client.post("/create_session"))
        sid = _UUID.search(opened).group().decode()  # type: ignore[union-attr]
        headers = {"X-Session-ID": sid}
        record("create", client.post(
            "/create", headers=headers, json={"env_name": "parity", "split": "train", "index": 1}
        ))
        record("task_tools", client.get("/parity/task_tools", headers=headers))
        record("prompt", client.get("/parity/prompt", headers=headers))
        record("messages", client.get("/parity/messages", headers=headers))
        calls = [
            ("echo", {"text": "hi"}), ("shout", {"text": "hi"}), ("echo", {"wrong": 1}),
            ("echo", {"text": 5}), ("no_such_tool", {}), ("answer", {"text": "xyz"}),
            ("echo", {"text": "after the end"}),
        ]
        for name, arguments in calls:
            record(f"call {name} {arguments}", client.post(
                "/parity/call", headers=headers, json={"name": name, "input": arguments}
            ))
        candidates = [{"messages": [{"role": "assistant", "blocks": [_TEXT]}]}]
        record("score_group", client.post(
            "/parity/score_group", headers=headers, json={"candidates": candidates}
        ))
        record("delete", client.post("/delete", headers=headers))
        record("prompt after delete", client.get("/parity/prompt", headers=headers))
        record("call after delete", client.post(
            "/parity/call", headers=headers, json={"name": "echo", "input": {"text": "x"}}
        ))
        record("delete_session", client.post("/delete_session", headers=headers))
    return answers


def test_an_sdk_server_next_to_ors_gym_answers_as_one_without_it() -> None:
    modes = ("plain", "ors_gym")
    procs: dict[str, subprocess.Popen[str]] = {}
    answers: dict[str, list[tuple[str, int, str, bytes]]] = {}
    try:
        for mode in modes:  # both start at once: most of the time is the SDK's import
            procs[mode] = _start_server(mode)
        started = {mode: _started(procs[mode], mode) for mode in modes}
        assert started["plain"]["ors_gym"] is False, "the plain server imported ors_gym"
        assert started["plain"]["hooked"] == "openreward.environments.environment"
        assert started["ors_gym"]["ors_gym"] is True
        assert started["ors_gym"]["hooked"] == "ors_gym._compat.openreward", (
            "LocalBackend did not install the introspection cache: nothing is compared"
        )
        for mode in modes:
            answers[mode] = _episode(started[mode]["url"])
    finally:
        for proc in procs.values():
            _stop_server(proc)
    assert [a[0] for a in answers["ors_gym"]] == [a[0] for a in answers["plain"]]
    for plain, hooked in zip(answers["plain"], answers["ors_gym"], strict=True):
        assert hooked == plain, plain[0]
    statuses = {step: status for step, status, _, _ in answers["plain"]}
    assert statuses["call echo {'text': 'hi'}"] == 200
    assert statuses["prompt after delete"] == 404
    bodies = {step: body for step, _, _, body in answers["plain"]}
    assert b"input_validation" in bodies["call echo {'wrong': 1}"]
    assert b"not_found" in bodies["call no_such_tool {}"]


# -- httpcore: an HTTP/1.1 connection's state lock ---------------------------------------


def _lean_pool_answers() -> tuple[list[bytes], list[Any]]:
    """Three requests on one connection of an ``Http11Pool`` (to a one-line HTTP server):
    the bodies, and the connection's state lock as each request found it."""
    import httpcore

    from ors_gym.backends.http.transport._http11 import Http11Pool

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def main() -> tuple[list[bytes], list[Any]]:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Http11Pool(ssl_context=httpx.create_ssl_context())
        bodies, locks = [], []
        for _ in range(3):
            request = httpcore.Request("GET", f"http://127.0.0.1:{port}/",
                                       headers=[(b"Host", b"127.0.0.1")])
            response = await pool.handle_async_request(request)
            bodies.append(b"".join([part async for part in response.stream]))  # type: ignore[union-attr]
            await response.aclose()
            conns = [c for idle in pool._idle.values() for c in idle]
            locks.append(conns[0].http._state_lock)
        await pool.aclose()
        server.close()
        await server.wait_closed()
        return bodies, locks

    return asyncio.run(main())


def test_an_http11_connection_has_the_state_lock_replaced_here() -> None:
    import importlib

    import httpcore

    from ors_gym.backends.http.transport._aio import AsyncioStream

    loop = asyncio.new_event_loop()
    connection = httpcore.AsyncHTTP11Connection(
        httpcore.Origin(b"http", b"127.0.0.1", 80), AsyncioStream(loop))
    loop.close()
    lock = connection._state_lock
    assert callable(lock.__aenter__) and callable(lock.__aexit__)
    # httpcore names its classes' module "httpcore": read the module defining them.
    source = inspect.getsource(importlib.import_module("httpcore._async.http11"))
    assert source.count("self._state_lock") == 3  # made once, entered with `async with` twice
    assert source.count("async with self._state_lock:") == 2
    assert compat_httpcore.lean_state_lock(connection) is True
    assert type(connection._state_lock) is asyncio.Lock
    bodies, locks = _lean_pool_answers()
    assert bodies == [b"ok"] * 3 and len({id(lock) for lock in locks}) == 1
    assert type(locks[0]) is asyncio.Lock and not locks[0].locked()


def test_outside_its_range_connections_keep_their_own_lock_and_answer_alike(
    monkeypatch: pytest.MonkeyPatch, fallback_log: Callable[[], list[str]],
) -> None:
    private, _ = _lean_pool_answers()
    monkeypatch.setattr(compat_httpcore, "_PRIVATE", False)
    public, locks = _lean_pool_answers()
    assert public == private == [b"ok"] * 3
    assert type(locks[0]) is not asyncio.Lock  # httpcore's own AsyncLock
    assert len(fallback_log()) == 1 and "_state_lock" in fallback_log()[0]


def test_run_first_step_runs_a_tasks_first_step_in_place_then_leaves_the_loop_as_it_was() -> None:
    loop = asyncio.new_event_loop()
    try:
        async def quick() -> bool:
            return asyncio.current_task() is not None and asyncio.get_running_loop() is loop

        task = compat_asyncio.run_first_step(loop, quick())
        assert task.done() and task.result() is True  # no loop pass was needed
        assert "call_soon" not in vars(loop)  # the shadowing method is gone
        assert asyncio._get_running_loop() is None

        async def waits() -> int:
            await asyncio.sleep(0)
            return 2

        task = compat_asyncio.run_first_step(loop, waits())
        assert not task.done()
        assert loop.run_until_complete(task) == 2
    finally:
        loop.close()


def test_renderers_hub_map_and_harmony_parser() -> None:
    """The names ors_gym reads from renderers, where renderers keeps them."""
    pytest.importorskip("renderers")
    assert compat_renderers.hub_renderer_name("Qwen/Qwen3-8B") == "qwen3"
    assert compat_renderers.hub_renderer_name("openai/gpt-oss-20b") == "gpt-oss"
    assert compat_renderers.hub_renderer_name("nobody/no-model") is None
    assert callable(compat_renderers.harmony_parser())


# -- openreward: the class caches ---------------------------------------------------------


@pytest.mark.parametrize("base_first", [True, False])
def test_a_subclass_overriding_list_tasks_is_served_its_own_tasks(base_first: bool) -> None:
    """The SDK caches a class's tasks on the class through ``hasattr``; a subclass loaded
    before or after its base filled that cache is still served its own tasks."""
    from ors_gym.backends.local.sdk import load_environment_classes

    class Base(Environment):
        @classmethod
        def list_splits(cls) -> list[str]:
            return ["train"]

        @classmethod
        def list_tasks(cls, split: str) -> list[dict[str, Any]]:
            return [{"id": "base"}]

        def get_prompt(self) -> list[TextBlock]:
            return [TextBlock(text="hi")]

        @tool
        def echo(self, params: Text) -> ToolOutput:
            return ToolOutput(blocks=[TextBlock(text=params.text)])

    class Sub(Base):
        @classmethod
        def list_tasks(cls, split: str) -> list[dict[str, Any]]:
            return [{"id": "sub"}]

    async def tasks() -> tuple[Any, Any]:
        if base_first:
            load_environment_classes([Base])
            assert (await Base.get_task("train", 0))["id"] == "base"
            load_environment_classes([Sub])
        else:
            load_environment_classes([Sub, Base])
            assert (await Base.get_task("train", 0))["id"] == "base"
        return await Base.get_task("train", 0), await Sub.get_task("train", 0)

    base, sub = asyncio.run(tasks())
    assert (base["id"], sub["id"]) == ("base", "sub")
    assert "_tasks_cache" in vars(Sub) and "_splits_cache" in vars(Sub)
