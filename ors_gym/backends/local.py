"""``LocalBackend``: SDK ``Environment`` classes hosted in this process, no server.

It answers every ``Backend`` method as the SDK's HTTP server
(``openreward/environments/server.py``) would, minus the transport: the same
dispatch (``call_session_tool``, so input validation, unknown tools, the
episode-finished latch and the per-tool locks are the SDK's own), the same
status for each refusal, and results equal to what ``HttpBackend`` parses from
the server's JSON, built straight from the SDK's objects without a JSON round
trip. One thing is done once instead of on every call: the SDK's dispatch
re-reads each tool's type hints and signature per call (about three quarters
of its time on a small tool); inside this backend's calls that answer comes
from a per-function cache (``backends/_introspection.py``).

The event loop. The SDK's dispatch is async. Each backend owns ONE private
event loop (never one per call), and the thread that calls drives it itself,
one loop pass for a call that never waits: no thread hop beyond the SDK's own
``asyncio.to_thread`` for sync tools, and per call no more than the asyncio Task
the server makes too. When several threads call at once, one drives while the others
hand their coroutine to the running loop and wait; whoever finds the loop idle
takes over, so calls from many threads run concurrently on one loop, as on the
server. A thread already running a loop of its own (Jupyter, ``asyncio.run``)
is blocked for the duration of a sync call anyway, so the private loop runs
there too, with that thread's running-loop marker set aside and restored.
Between calls the loop is idle: async background work an environment spawns
progresses during calls, not between them (work in threads is unaffected).

The backend pickles as its environment specs (``AsyncVectorEnv`` workers);
the loop and sessions are made again on first use, also in a forked child.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import sys
import threading
import uuid
import weakref
from collections.abc import Awaitable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from ors_gym.backends import _introspection
from ors_gym.errors import (
    OrsError,
    OrsRequestError,
    OrsServerError,
    OrsSessionExpired,
    OrsToolError,
)
from ors_gym.protocol import (
    Block,
    CallResult,
    GroupScore,
    ImageBlock,
    ListToolsOutput,
    Message,
    RunToolError,
    RunToolSuccess,
    Split,
    TextBlock,
    ToolOutput,
    check_secrets,
    check_task_source,
    parse,
)

__all__ = ["LocalBackend"]

logger = logging.getLogger("ors_gym")

_T = TypeVar("_T")
_LOCATION = "in-process"
_EnvSpec = type | str

#: The SDK, imported on first use (``import ors_gym.backends.local`` works without it).
_sdk: Any = None


def _load_sdk() -> Any:
    """Import the SDK once, quietly, and bring already-imported SDK loggers to the chosen level."""
    global _sdk
    from ors_gym.serving import _require_sdk, quiet_sdk_logging

    quiet_sdk_logging()
    if _sdk is None:
        environments = _require_sdk()  # raises OrsDependencyError naming the `local` extra
        from types import SimpleNamespace

        from openreward.environments import session, types, utils

        _sdk = SimpleNamespace(
            Environment=environments.Environment,
            TextBlock=types.TextBlock,
            ImageBlock=types.ImageBlock,
            GroupScore=types.GroupScore,
            ScoreGroup=types.ScoreGroup,
            call_session_tool=session.call_session_tool,
            list_session_tools=session.list_session_tools,
            run_user_callable=utils.run_user_callable,
        )
        _introspection.install()
    _quiet_loaded_sdk_loggers()
    return _sdk


def _quiet_loaded_sdk_loggers() -> None:
    """Raise SDK loggers made before ``OPENREWARD_LOG_LEVEL`` was set to that level.

    The SDK builds each module's structlog logger at import, filtering at the
    level the environment named then (INFO by default: one stdout line per
    tool call). If the user imported the SDK before ors_gym set the variable,
    those loggers are swapped for equal ones filtering at the level now
    configured. Only ever quieter: a level the user chose explicitly stands.
    """
    from openreward.log_utils import _resolve_log_level

    level = _resolve_log_level()
    try:
        from structlog import make_filtering_bound_logger
    except ImportError:  # pragma: no cover - structlog is an SDK dependency
        return
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "openreward" or name.startswith("openreward.")):
            continue
        for attr, value in list(vars(module).items()):
            # The classes make_filtering_bound_logger builds; lazy proxies are left alone.
            if not type(value).__name__.startswith("BoundLoggerFilteringAt"):
                continue
            try:
                if value.get_effective_level() >= level:
                    continue
                wrapper: Any = make_filtering_bound_logger(level)
                quiet = wrapper(value._logger, value._processors, value._context)
            except Exception:  # a look-alike that is not a structlog logger
                continue
            setattr(module, attr, quiet)


# -- values: what the caller gets equals what HttpBackend parses from the server's JSON ----


def _jsonable(value: Any) -> Any:
    # As HttpBackend sends them: numpy scalars and arrays as lists, pydantic models
    # (protocol Messages in score_group candidates) as their JSON form.
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _json_in(value: Any) -> Any:
    """``value`` as the server would receive it through JSON: a plain, detached copy.

    Plain dicts, lists, str, int, float, bool and None are copied directly;
    anything else takes the exact route HttpBackend takes (``json.dumps`` with
    numpy values as lists), so the environment sees the same input either way.
    """
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                return _json_in_slow(value)
            out[key] = _json_in(item)
        return out
    if kind is list or kind is tuple:
        return [_json_in(item) for item in value]
    return _json_in_slow(value)


def _json_in_slow(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=_jsonable))
    except (TypeError, ValueError) as exc:
        raise _NotJSON(str(exc)) from None


class _NotJSON(TypeError):
    """A value HttpBackend could not send either; the caller names which one."""


def _not_json(what: str, exc: _NotJSON) -> TypeError:
    return TypeError(
        f"{what} cannot be sent as JSON: {exc}. "
        "Pass only dicts, lists, str, int, float, bool and None."
    )


def _json_out(value: Any) -> Any:
    """``value`` as it reads after the server's ``model_dump_json``: tuples become lists,
    mappings dicts, inf/nan None; anything else goes through pydantic's own serialiser."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if value - value == 0 else None  # inf and nan serialise as null
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                return _json_out_slow(value)
            out[key] = _json_out(item)
        return out
    if kind is list or kind is tuple:
        return [_json_out(item) for item in value]
    return _json_out_slow(value)


def _json_out_slow(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, inf_nan_mode="null")


_new = object.__new__
_set = object.__setattr__
_ALL_FIELDS: dict[type, set[str]] = {}


def _build(cls: type[_T], data: dict[str, Any]) -> _T:
    """An ``ors_gym.protocol`` model from already-valid field values, skipping validation.

    What ``model_construct`` does, without its per-field loop: the values come
    from SDK models that were validated already and are field-for-field the
    same. Every field counts as set, as after parsing the server's JSON (which
    carries every field). ``tests/test_local_backend.py`` checks the result
    equals the validated model.
    """
    fields = _ALL_FIELDS.get(cls)
    if fields is None:
        fields = _ALL_FIELDS[cls] = set(cls.model_fields)  # type: ignore[attr-defined]
    obj = _new(cls)
    _set(obj, "__dict__", data)
    _set(obj, "__pydantic_fields_set__", set(fields))
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


def _block(block: Any) -> Any:
    """An SDK TextBlock/ImageBlock as the ors_gym one; anything else via its JSON form."""
    kind = type(block)
    if kind is _sdk.TextBlock:
        detail = block.detail
        return _build(
            TextBlock,
            {
                "type": "text",
                "text": block.text,
                "detail": None if detail is None else _json_out(detail),
            },
        )
    if kind is _sdk.ImageBlock:
        detail = block.detail
        return _build(
            ImageBlock,
            {
                "type": "image",
                "data": block.data,
                "mimeType": block.mimeType,
                "detail": None if detail is None else _json_out(detail),
            },
        )
    data = block.model_dump(mode="json") if isinstance(block, BaseModel) else _json_out(block)
    return parse(Block, data, what="block", where=_LOCATION)


def _reward(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if value - value == 0 else None


def _call_result(result: Any) -> CallResult:
    """The SDK's RunToolSuccess/RunToolError as the ors_gym model HttpBackend would return."""
    if result.ok:
        out = result.output
        metadata = out.metadata
        reward = out.reward
        if type(reward) is not float or reward - reward != 0:
            reward = _reward(reward)
        return _build(
            RunToolSuccess,
            {
                "ok": True,
                "output": _build(
                    ToolOutput,
                    {
                        "blocks": [_block(b) for b in out.blocks],
                        "metadata": None if metadata is None else _json_out(metadata),
                        "reward": reward,
                        "finished": bool(out.finished),
                    },
                ),
            },
        )
    return _build(RunToolError, {"ok": False, "error": result.error, "reason": result.reason})


def _model_json(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else _json_out(value)


def _convert_split(split: Any) -> dict[str, Any]:
    """A split as the server lists it (its ``_convert_to_split``)."""
    if isinstance(split, BaseModel):
        return split.model_dump(mode="json")
    if split in ("train", "validation", "test"):
        return {"name": split, "type": split}
    return {"name": split, "type": "validation"}


def _split_names(cls: Any) -> list[str]:
    return [s if isinstance(s, str) else s.name for s in cls._list_splits_cached()]


def _exc_detail(exc: BaseException) -> str:
    """The ``detail`` the SDK server answers a 500 with (``return_errors="exception"``)."""
    return f"{type(exc).__name__}: {exc}"


class _Refused(Exception):
    """What the server answers as an HTTP error status, raised inside a coroutine."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


# -- sessions --------------------------------------------------------------------------


class _Session:
    """One live environment instance, with its setup running as on the server."""

    __slots__ = ("deleted", "env", "env_name", "error", "ready", "setup_task")

    def __init__(self, env: Any, env_name: str) -> None:
        self.env = env
        self.env_name = env_name
        self.ready = False  # setup() returned; the hot path checks only this
        self.error: BaseException | None = None
        self.deleted = False
        self.setup_task: asyncio.Task[None] | None = None

    async def run_setup(self) -> None:
        try:
            await _sdk.run_user_callable(self.env.setup)
        except Exception as exc:
            logger.debug("setup() of a %s session failed: %s", self.env_name, _exc_detail(exc))
            self.error = exc
        else:
            self.ready = True

    async def wait_ready(self) -> None:
        """Wait for setup() like the server's ``require_ready_session``."""
        task = self.setup_task
        if task is not None and not task.done():
            await asyncio.wait((task,))
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self.deleted:
            raise _Refused(410, "Session deleted")
        if self.error is not None:
            raise _Refused(500, _exc_detail(self.error))

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        await self.wait_ready()
        return await _dispatch(self.env, name, arguments)

    async def prompt(self) -> Any:
        await self.wait_ready()
        return await _sdk.run_user_callable(self.env.get_prompt)

    async def messages(self) -> Any:
        await self.wait_ready()
        return list(await _sdk.run_user_callable(self.env.get_messages))

    async def task_tools(self) -> Any:
        # Like the server's require_existing_session: no wait for setup().
        self.raise_if_failed()
        _introspection.enable()
        return await _sdk.list_session_tools(self.env, None)

    async def score_group(self, candidates: list[Any]) -> list[Any]:
        await self.wait_ready()
        scores = await _sdk.run_user_callable(self.env.score_group, candidates)
        scores = [
            s if isinstance(s, _sdk.GroupScore) else _sdk.GroupScore(reward=float(s))
            for s in scores
        ]
        if len(scores) != len(candidates):
            raise ValueError(
                f"score_group returned {len(scores)} scores for {len(candidates)} candidates"
            )
        return scores

    async def close(self) -> None:
        """The server's ``_delete_session``: cancel a running setup, then teardown()."""
        self.deleted = True
        task = self.setup_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait((task,))
        try:
            await _run_hook(self.env.teardown)
        except Exception as exc:
            logger.warning("teardown() of a %s session failed: %s", self.env_name,
                           _exc_detail(exc), exc_info=exc)


async def _dispatch(env: Any, name: str, arguments: dict[str, Any]) -> Any:
    """The SDK's own dispatch, with its per-call tool introspection cached for this call."""
    _introspection.enable()  # this call's Task context only: see backends/_introspection.py
    return await _sdk.call_session_tool(env, None, name, arguments)


async def _run_hook(fn: Any) -> Any:
    """``run_user_callable(fn)``, which also works while the interpreter exits.

    A session closed at exit (an env's finaliser, an atexit handler) finds the
    worker threads the SDK runs sync hooks in already shut down; the hook then
    runs on the loop itself rather than not at all. A hook that started and
    raised is never run twice.
    """
    if inspect.iscoroutinefunction(fn):
        return await fn()
    started = False

    def marked() -> Any:
        nonlocal started
        started = True
        return fn()

    try:
        return await _sdk.run_user_callable(marked)
    except RuntimeError:
        if started:
            raise
        logger.debug("no worker thread for %s (interpreter exiting); running it inline", fn)
        result = fn()
        return await result if inspect.isawaitable(result) else result


async def _open(
    cls: Any, env_name: str, task_spec: Any, split: str | None, index: int | None,
    secrets: dict[str, str],
) -> _Session:
    """The server's ``/create``: resolve the task, build the instance, start setup()."""
    if task_spec is None:
        try:
            task_spec = await _sdk.run_user_callable(cls.get_task, split, index)
        except IndexError as exc:
            raise _Refused(400, "Invalid index") from exc
    env = await _sdk.run_user_callable(cls, task_spec=task_spec, secrets=secrets)
    session = _Session(env, env_name)
    session.setup_task = asyncio.get_running_loop().create_task(session.run_setup())
    await asyncio.sleep(0)  # let setup() start (a sync one enters its thread) before returning
    return session


async def _close_all(sessions: list[_Session]) -> None:
    await asyncio.gather(*(s.close() for s in sessions))


# -- the event loop ----------------------------------------------------------------------------

#: Loops inherited through fork: never closed in the child (their executor locks
#: and file descriptors belong to the parent's threads), never collected.
_ABANDONED: list[asyncio.AbstractEventLoop] = []


class _LoopRunner:
    """One private event loop, driven by whichever calling thread finds it idle.

    ``_drive`` is held by the thread running the loop. A thread that finds it
    held hands its coroutine to the running loop and waits on ``_cond`` for
    the result, or for the loop to come free, to drive it itself. The common,
    uncontended call costs one non-blocking lock acquire and release.
    """

    def __init__(self) -> None:
        self._drive = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0  # threads in _join; a releasing driver notifies only if any
        self._loop: asyncio.AbstractEventLoop | None = None

    def abandon(self) -> None:
        """Forget the loop without touching it (in a forked child)."""
        if self._loop is not None:
            _ABANDONED.append(self._loop)
        self.__init__()  # type: ignore[misc]

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the private loop from any thread; returns its result."""
        outer = asyncio._get_running_loop()
        loop = self._loop
        if loop is None:
            loop = self._new_loop()
        if outer is loop:
            coro.close()
            raise RuntimeError(
                "LocalBackend was called synchronously from inside one of its own "
                "environments (a tool, setup() or prompt), which would deadlock; "
                "environments must not call the backend that hosts them"
            )
        if self._drive.acquire(False):
            try:
                return _run_on(loop, coro, outer)
            finally:
                self._release()
        return self._join(loop, coro, outer)

    def _new_loop(self) -> asyncio.AbstractEventLoop:
        with self._cond:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop

    def _release(self) -> None:
        # Release first, then look for waiters; a waiter counts itself first, then tries
        # the lock: so either it gets the lock or this sees it and wakes it.
        self._drive.release()
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def _join(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _T],
              outer: Any) -> _T:
        # Another thread is driving: hand the coroutine to the running loop, and take
        # over the driving if that thread finishes first.
        done = asyncio.run_coroutine_threadsafe(coro, loop)
        done.add_done_callback(self._wake)
        take_over = False
        with self._cond:
            self._waiting += 1
            try:
                while not done.done() and not (take_over := self._drive.acquire(False)):
                    self._cond.wait()
            finally:
                self._waiting -= 1
        if not done.done():
            try:
                _run_on(loop, asyncio.wrap_future(done, loop=loop), outer)
            finally:
                self._release()
        elif take_over:
            self._release()
        return done.result()

    def _wake(self, _: object) -> None:
        with self._cond:
            self._cond.notify_all()

    def close(self, final: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``final``, cancel what is left, and close the loop; reusable afterwards.

        Waits for calls other threads have in flight.
        """
        loop = self._loop
        outer = asyncio._get_running_loop()
        if loop is None or outer is loop:
            if final is not None:
                final.close()
            if loop is not None:
                raise RuntimeError(
                    "LocalBackend.close() was called from inside one of its own environments"
                )
            return
        self._drive.acquire()
        try:
            if outer is not None:
                asyncio._set_running_loop(None)
            try:
                if final is not None:
                    loop.run_until_complete(final)
            finally:
                _finish_loop(loop)
                if outer is not None:
                    asyncio._set_running_loop(outer)
        finally:
            self._loop = None
            self._release()


def _run_on(loop: asyncio.AbstractEventLoop, aw: Awaitable[_T], outer: Any) -> _T:
    """Run ``aw`` on ``loop`` in this thread (which holds the loop's drive lock)."""
    # A thread running its own loop is blocked in this call anyway: run ours there,
    # with its running-loop marker set aside (asyncio refuses to nest otherwise).
    if outer is not None:
        asyncio._set_running_loop(None)
    try:
        if not asyncio.iscoroutine(aw):
            return loop.run_until_complete(aw)
        # One loop pass runs the task's first step, then the stop queued behind it:
        # a call that never waits (most tool calls) costs one pass instead of the two
        # run_until_complete makes (the second only runs its done-callback). A call
        # that waits is carried on to completion.
        task = loop.create_task(aw)
        loop.call_soon(loop.stop)
        loop.run_forever()
        if not task.done():
            return loop.run_until_complete(task)
        return task.result()
    finally:
        if outer is not None:
            asyncio._set_running_loop(outer)


def _finish_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What ``asyncio.run`` does on the way out: cancel tasks, flush generators and threads."""
    try:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        except RuntimeError as exc:  # no new thread to wait in while the interpreter exits
            logger.debug("default executor not shut down: %s", exc)
    finally:
        loop.close()


_LIVE: weakref.WeakSet[LocalBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(_LIVE):
        backend._forget_runtime()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- the backend ------------------------------------------------------------------------------


class LocalBackend:
    """SDK ``Environment`` classes served in this process, behaving like their HTTP server.

    ``environments`` is one class or ``"module:Class"`` string, or a sequence
    of them; the first is the default. Names are the class names lower-cased,
    as on the server. Needs the ``local`` extra (``pip install 'ors-gym[local]'``).
    """

    def __init__(self, environments: _EnvSpec | Sequence[_EnvSpec]) -> None:
        specs: list[_EnvSpec] = (
            [environments] if isinstance(environments, str | type) else list(environments)
        )
        if not specs:
            raise ValueError(
                "LocalBackend needs at least one environment: an SDK Environment subclass "
                "or a 'module:Class' string such as 'ors_gym.envs.math:Math'"
            )
        sdk = _load_sdk()
        from ors_gym.serving import load_environment_classes

        self._specs = specs
        self._classes: dict[str, Any] = {}
        for cls in load_environment_classes(specs):
            key = cls.name().lower()  # type: ignore[attr-defined]
            if key in self._classes:
                raise ValueError(
                    f"two environments are both named {key!r}; environment names "
                    "(class names, lower-cased) must be unique"
                )
            _validate(key, cls, sdk)
            self._classes[key] = cls
        self.location: str = _LOCATION
        self._tools_json: dict[str, dict[str, Any]] = {}
        self._init_runtime()
        _LIVE.add(self)

    def _init_runtime(self) -> None:
        # Everything that must not cross a pickle or a fork; made again lazily.
        self._runner = _LoopRunner()
        self._sessions: dict[str, _Session] = {}

    def _forget_runtime(self) -> None:
        """In a forked child: the parent's sessions and loop are not ours to use or close."""
        self._runner.abandon()
        self._sessions = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"specs": self._specs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["specs"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"LocalBackend([{', '.join(self._classes)}])"

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def open_sessions(self) -> frozenset[str]:
        """Ids of the sessions created and not yet deleted."""
        return frozenset(self._sessions)

    def environment_class(self, env_name: str) -> type:
        """The SDK class served as ``env_name``."""
        return self._class(env_name)[1]

    # -- helpers -------------------------------------------------------------------------

    def _class(self, env_name: str) -> tuple[str, Any]:
        cls = self._classes.get(env_name) if isinstance(env_name, str) else None
        if cls is not None:
            return env_name, cls
        if not isinstance(env_name, str) or not env_name:
            raise OrsRequestError(
                f"environment name must be a non-empty str, got {env_name!r}",
                server=_LOCATION,
            )
        key = env_name.lower()
        cls = self._classes.get(key)
        if cls is None:
            raise _http_error(
                OrsRequestError,
                404,
                f"unknown environment {env_name!r}; this backend hosts: "
                f"{', '.join(self._classes)}",
                env_name=env_name,
            )
        return key, cls

    def _check_split(self, env: str, cls: Any, split: str, what: str) -> None:
        names = _split_names(cls)
        if split not in names:
            raise _http_error(
                OrsRequestError,
                400,
                f"{what} was refused (400): Invalid split; {env} has splits: "
                f"{', '.join(map(str, names))}",
                env_name=env,
            )

    def _session(self, env_name: str, session_id: str, tool: str | None = None) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            if not isinstance(env_name, str) or env_name not in self._classes:
                self._class(env_name)  # an unknown environment is the clearer error
            raise OrsSessionExpired(
                f"session {session_id} is gone (deleted, or its LocalBackend was closed); "
                "call reset() to start a new episode (404: Active environment not found)",
                server=_LOCATION,
                env_name=env_name,
                session_id=session_id,
                tool=tool,
            )
        if env_name != session.env_name and (
            not isinstance(env_name, str) or env_name not in self._classes
        ):
            self._class(env_name)  # the server ignores a known but different name; so do we
        return session

    def _run_session(
        self, coro: Coroutine[Any, Any, _T], what: str, env_name: str, session_id: str,
        tool: str | None = None,
    ) -> _T:
        """Run a session coroutine; server refusals and failures become the HTTP errors."""
        try:
            return self._runner.run(coro)
        except _Refused as exc:
            raise _refusal(exc, what, env_name, session_id, tool) from None
        except Exception as exc:
            raise _http_error(
                OrsServerError, 500, _server_failure(what, _exc_detail(exc)),
                env_name=env_name, session_id=session_id, tool=tool,
            ) from exc

    def _run_class(self, coro: Coroutine[Any, Any, _T], what: str, env: str) -> _T:
        try:
            return self._runner.run(coro)
        except _Refused as exc:
            raise _refusal(exc, what, env, None, None) from None
        except Exception as exc:
            raise _http_error(
                OrsServerError, 500, _server_failure(what, _exc_detail(exc)), env_name=env
            ) from exc

    # -- discovery (no session) ---------------------------------------------------------

    def list_environments(self) -> list[str]:
        """Environment names, lower-cased; the first is the default."""
        return list(self._classes)

    def tools(self, env_name: str) -> ListToolsOutput:
        """The environment's shared tools and its terminal tool."""
        env, cls = self._class(env_name)
        data = self._tools_json.get(env)
        if data is None:
            data = self._tools_json[env] = cls.list_tools().model_dump(mode="json")
        return parse(ListToolsOutput, data, what=f"{env} tools", where=_LOCATION)

    def splits(self, env_name: str) -> list[Split]:
        """The task splits, in the environment's order."""
        env, cls = self._class(env_name)
        data = [_convert_split(s) for s in cls._list_splits_cached()]
        return parse(list[Split], data, what=f"{env} splits", where=_LOCATION)

    def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        """Every task of ``split``; raises OrsRequestError for index-only environments."""
        env, cls = self._class(env_name)
        what = f"tasks({env!r}, {split!r})"
        self._check_split(env, cls, split, what)

        async def list_tasks() -> Any:
            try:
                return await _sdk.run_user_callable(cls.list_tasks, split)
            except NotImplementedError as exc:
                raise _Refused(
                    400,
                    "list_tasks is not supported for this environment. Use the index-based "
                    "API (num_tasks + get_task) instead.",
                ) from exc

        tasks = self._run_class(list_tasks(), what, env)
        return parse(list[dict[str, Any]], _json_out(tasks), what=what, where=_LOCATION)

    def num_tasks(self, env_name: str, split: str) -> int:
        """How many tasks ``split`` has."""
        env, cls = self._class(env_name)
        what = f"num_tasks({env!r}, {split!r})"
        self._check_split(env, cls, split, what)
        count = self._run_class(_sdk.run_user_callable(cls.num_tasks, split), what, env)
        return int(parse(int, _json_out(count), what=what, where=_LOCATION))

    def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split`` (negative counts from the end)."""
        env, cls = self._class(env_name)
        what = f"task({env!r}, {split!r}, {index!r})"
        self._check_split(env, cls, split, what)

        async def get_task() -> Any:
            try:
                return await _sdk.run_user_callable(cls.get_task, split, index)
            except IndexError as exc:
                raise _Refused(400, "Invalid index") from exc

        task = self._run_class(get_task(), what, env)
        return dict(parse(dict[str, Any], _json_out(task), what=what, where=_LOCATION))

    def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        """Tasks ``start:stop`` of ``split``, with Python slice rules."""
        env, cls = self._class(env_name)
        what = f"task_range({env!r}, {split!r}, {start!r}, {stop!r})"
        self._check_split(env, cls, split, what)

        async def get_range() -> Any:
            try:
                return await _sdk.run_user_callable(cls.get_task_range, split, start, stop)
            except IndexError as exc:
                raise _Refused(400, "Invalid index range") from exc

        tasks = self._run_class(get_range(), what, env)
        return parse(list[dict[str, Any]], _json_out(tasks), what=what, where=_LOCATION)

    # -- sessions -----------------------------------------------------------------------

    def create_session(
        self,
        env_name: str,
        *,
        task_spec: Mapping[str, Any] | None = None,
        split: str | None = None,
        index: int | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> str:
        """Open a session (one episode) for a task; returns its id.

        Give either ``task_spec`` or ``split`` and ``index``. As on the server the
        instance is built here and ``setup()`` runs in the background: a failed
        setup surfaces as OrsServerError on the session's next request.
        """
        check_task_source(task_spec, split, index)
        env, cls = self._class(env_name)
        what = f"create a {env} session"
        plain_secrets = check_secrets(secrets)
        if task_spec is not None:
            try:
                spec = _json_in(task_spec)
            except _NotJSON as exc:
                raise _not_json("task_spec", exc) from None
            if not isinstance(spec, dict):
                raise TypeError(f"task_spec must be a mapping, got {type(task_spec).__name__}")
        else:
            spec = None
            assert split is not None
            self._check_split(env, cls, split, what)
        sid = str(uuid.uuid4())
        session = self._run_session(
            _open(cls, env, spec, split, index, plain_secrets), what, env, sid
        )
        self._sessions[sid] = session
        return sid

    def prompt(self, env_name: str, session_id: str) -> list[Block]:
        """The first observation, as blocks. Ask once per episode."""
        session = self._session(env_name, session_id)
        blocks = self._run_session(
            session.prompt(), f"prompt of {session.env_name}", env_name, session_id
        )
        return [_block(b) for b in blocks]

    def messages(self, env_name: str, session_id: str) -> list[Message]:
        """The prompt as a role-tagged conversation."""
        session = self._session(env_name, session_id)
        what = f"messages of {session.env_name}"
        messages = self._run_session(session.messages(), what, env_name, session_id)
        data = [_model_json(m) for m in messages]
        return parse(list[Message], data, what=what, where=_LOCATION)

    def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        """Shared tools plus this task's own tools (``list_task_tools``)."""
        session = self._session(env_name, session_id)
        what = f"task tools of {session.env_name}"
        listed = self._run_session(session.task_tools(), what, env_name, session_id)
        return parse(ListToolsOutput, listed.model_dump(mode="json"), what=what, where=_LOCATION)

    def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> CallResult:
        """Run one tool call through the SDK's dispatch; agent mistakes are ``RunToolError``.

        Raises OrsToolError when the tool's own code raised (the server's SSE
        ``error`` event), with the exception chained.
        """
        session = self._sessions.get(session_id)
        if session is None or env_name != session.env_name:
            session = self._session(env_name, session_id, name)
        try:
            args = _json_in(arguments if type(arguments) is dict else dict(arguments))
        except _NotJSON as exc:
            raise _not_json(f"the arguments of tool call {name!r}", exc) from None
        if session.ready:
            coro = _dispatch(session.env, name, args)
        else:
            coro = session.call(name, args)
        try:
            result = self._runner.run(coro)
        except _Refused as exc:
            raise _refusal(exc, f"tool call {name!r}", env_name, session_id, name) from None
        except Exception as exc:
            raise OrsToolError(
                f"tool call {name!r} raised: {exc}. The tool's own code failed; "
                "this is a bug in the environment, not the agent",
                server=_LOCATION, env_name=env_name, session_id=session_id, tool=name,
            ) from exc
        return _call_result(result.root)

    def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> list[GroupScore]:
        """Score candidate transcripts (``{"messages": [...], "metadata": ...}``), index-aligned.

        Messages may be dicts or ``ors_gym.protocol.Message`` objects. Raises
        OrsRequestError if the environment does not implement group scoring.
        """
        session = self._session(env_name, session_id)
        env = session.env_name
        if not type(session.env)._supports_score_group():
            raise _http_error(
                OrsRequestError, 404,
                f"score_group was refused (404): Environment {env!r} does not implement "
                "score_group",
                env_name=env_name, session_id=session_id,
            )
        try:
            payload = _sdk.ScoreGroup.model_validate(
                {"candidates": _json_in([dict(c) for c in candidates])}
            )
        except (ValueError, _NotJSON) as exc:
            raise _http_error(
                OrsRequestError, 422, f"score_group was refused (422): {exc}",
                env_name=env_name, session_id=session_id,
            ) from None
        try:
            scores = self._runner.run(session.score_group(list(payload.candidates)))
        except _Refused as exc:
            raise _refusal(exc, "score_group", env_name, session_id, None) from None
        except Exception as exc:
            raise OrsToolError(
                f"score_group raised: {exc}. The environment's own code failed",
                server=_LOCATION, env_name=env_name, session_id=session_id,
            ) from exc
        return parse(list[GroupScore], [s.model_dump(mode="json") for s in scores],
                     what="score_group result", where=_LOCATION)

    def delete_session(self, session_id: str) -> None:
        """End the session: cancel a running setup, run ``teardown()``; idempotent."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._runner.run(session.close())

    def ping(self, session_id: str) -> None:
        """Raises OrsSessionExpired once the session is gone (nothing expires in-process)."""
        if session_id not in self._sessions:
            raise OrsSessionExpired(
                f"session {session_id} is gone (deleted, or its LocalBackend was closed); "
                "call reset() to start a new episode (404: Active environment not found)",
                server=_LOCATION,
                session_id=session_id,
            )

    def close(self) -> None:
        """Tear down every open session and close the event loop; safe to call twice.

        The backend stays usable: the next call makes a new loop.
        """
        sessions = list(self._sessions.values())
        self._sessions = {}
        self._runner.close(_close_all(sessions) if sessions else None)


def _validate(key: str, cls: Any, sdk: Any) -> None:
    """The checks the SDK ``Server`` makes at start-up, with its messages."""
    listed = cls.list_tools()
    if not listed.tools and listed.terminal_tool is None:
        raise ValueError(
            f"Environment '{key}' has no tools defined. Add at least one @tool method."
        )
    if not cls._list_splits_cached():
        raise ValueError(
            f"Environment '{key}' has no splits defined. Implement list_splits() to return "
            "at least one split."
        )
    env_base = sdk.Environment
    if cls.get_prompt is env_base.get_prompt and cls.get_messages is env_base.get_messages:
        raise ValueError(
            f"Environment '{key}' implements neither get_prompt() nor get_messages(). "
            "Implement get_prompt() (or get_messages() for a conversation-shaped environment)."
        )


def _http_error(
    cls: type[OrsError], status: int, message: str, *, env_name: str | None = None,
    session_id: str | None = None, tool: str | None = None,
) -> OrsError:
    err = cls(message, server=_LOCATION, env_name=env_name, session_id=session_id, tool=tool)
    err.status_code = status  # type: ignore[attr-defined]
    return err


def _server_failure(what: str, detail: str) -> str:
    return (
        f"{what} failed in the environment (500): {detail}; this is a bug or a failed "
        "setup() in the environment; running it again gives the same answer"
    )


def _refusal(
    exc: _Refused, what: str, env_name: str, session_id: str | None, tool: str | None
) -> OrsError:
    """The error HttpBackend raises for the status the server would have answered."""
    if exc.status in (404, 410) and session_id is not None:
        return OrsSessionExpired(
            f"session {session_id} is gone (deleted, or its LocalBackend was closed); "
            f"call reset() to start a new episode ({exc.status}: {exc.detail})",
            server=_LOCATION, env_name=env_name, session_id=session_id, tool=tool,
        )
    if exc.status >= 500:
        return _http_error(
            OrsServerError, exc.status, _server_failure(what, exc.detail),
            env_name=env_name, session_id=session_id, tool=tool,
        )
    return _http_error(
        OrsRequestError, exc.status, f"{what} was refused ({exc.status}): {exc.detail}",
        env_name=env_name, session_id=session_id, tool=tool,
    )
