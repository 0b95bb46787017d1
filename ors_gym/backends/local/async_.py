"""``AsyncLocalBackend``: SDK ``Environment`` classes hosted in this process, awaited.

It answers every ``AsyncBackend`` method as the SDK's HTTP server
(``openreward/environments/server.py``) would, minus the transport: the same
dispatch (so input validation, unknown tools, the episode-finished latch and
the per-tool locks are the SDK's own), the same status for each refusal, and
results equal to what the HTTP backend parses from the server's JSON. Its
coroutines run on the caller's event loop, where setup() tasks and the SDK's
own ``asyncio.to_thread`` work live too: use one instance from one loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from ors_gym._compat.openreward import list_splits, supports_score_group
from ors_gym.backends._face import AsyncFace
from ors_gym.backends.base import SessionArgs, check_session_args, secret_values
from ors_gym.backends.local import sdk as _sdk
from ors_gym.backends.local._session import Session, close_all, dispatch, open_session
from ors_gym.backends.local._values import (
    LOCATION,
    NotJSON,
    Refused,
    call_result,
    convert_split,
    exc_detail,
    json_in,
    json_out,
    model_json,
    not_json,
    split_names,
    to_block,
)
from ors_gym.errors import (
    OrsError,
    OrsRequestError,
    OrsSessionExpired,
    OrsToolError,
    error_for_status,
)
from ors_gym.protocol import (
    Block,
    CallResult,
    GroupScore,
    ListToolsOutput,
    Message,
    Split,
    parse,
)

__all__ = ["AsyncLocalBackend"]

_T = TypeVar("_T")
EnvSpec = type | str


class AsyncLocalBackend(AsyncFace):
    """SDK ``Environment`` classes served in this process, behaving like their HTTP server.

    ``environments`` is one class or ``"module:Class"`` string, or a sequence
    of them; the first is the default. Names are the class names lower-cased,
    as on the server. Needs the ``local`` extra (``pip install 'ors-gym[local]'``).
    """

    location: str = LOCATION

    def __init__(self, environments: EnvSpec | Sequence[EnvSpec]) -> None:
        specs: list[EnvSpec] = (
            [environments] if isinstance(environments, str | type) else list(environments)
        )
        if not specs:
            raise ValueError(
                "an in-process backend needs at least one environment: an SDK Environment "
                "subclass or a 'module:Class' string such as 'ors_gym.envs.math:Math'"
            )
        _sdk.load_sdk()
        self._specs = specs
        self._classes: dict[str, Any] = {}
        for cls in _sdk.load_environment_classes(specs):
            key = cls.name().lower()  # type: ignore[attr-defined]
            if key in self._classes:
                raise ValueError(
                    f"two environments are both named {key!r}; environment names "
                    "(class names, lower-cased) must be unique"
                )
            _sdk.validate(key, cls)
            self._classes[key] = cls
        self._tools_json: dict[str, dict[str, Any]] = {}
        self._sessions: dict[str, Session] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"specs": self._specs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["specs"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"{type(self).__name__}([{', '.join(self._classes)}])"

    @property
    def open_sessions(self) -> frozenset[str]:
        """Ids of the sessions created and not yet deleted."""
        return frozenset(self._sessions)

    def environment_class(self, env_name: str) -> type:
        """The SDK class served as ``env_name``."""
        return self._class(env_name)[1]

    def list_names(self) -> list[str]:
        """The names served, without awaiting (``list_environments`` is the protocol's)."""
        return list(self._classes)

    def forget_sessions(self) -> None:
        """Drop every session without closing it (in a forked child: they are the parent's)."""
        self._sessions = {}

    # -- discovery (no session) ---------------------------------------------------------

    async def list_environments(self) -> list[str]:
        """Environment names, lower-cased; the first is the default."""
        return list(self._classes)

    async def tools(self, env_name: str) -> ListToolsOutput:
        """The environment's shared tools and its terminal tool."""
        env, cls = self._class(env_name)
        data = self._tools_json.get(env)
        if data is None:
            data = self._tools_json[env] = cls.list_tools().model_dump(mode="json")
        return parse(ListToolsOutput, data, what=f"{env} tools", where=LOCATION)

    async def splits(self, env_name: str) -> list[Split]:
        """The task splits, in the environment's order."""
        env, cls = self._class(env_name)
        data = [convert_split(s) for s in list_splits(cls)]
        return parse(list[Split], data, what=f"{env} splits", where=LOCATION)

    async def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        """Every task of ``split``; raises OrsRequestError for index-only environments."""
        env, cls = self._class(env_name)
        what = f"tasks({env!r}, {split!r})"
        self._check_split(env, cls, split, what)

        async def list_tasks() -> Any:
            try:
                return await _sdk.sdk.run_user_callable(cls.list_tasks, split)
            except NotImplementedError as exc:
                raise Refused(
                    400,
                    "list_tasks is not supported for this environment. Use the index-based "
                    "API (num_tasks + get_task) instead.",
                ) from exc

        tasks = await self._run(list_tasks(), what, env)
        return parse(list[dict[str, Any]], json_out(tasks), what=what, where=LOCATION)

    async def num_tasks(self, env_name: str, split: str) -> int:
        """How many tasks ``split`` has."""
        env, cls = self._class(env_name)
        what = f"num_tasks({env!r}, {split!r})"
        self._check_split(env, cls, split, what)
        count = await self._run(_sdk.sdk.run_user_callable(cls.num_tasks, split), what, env)
        return int(parse(int, json_out(count), what=what, where=LOCATION))

    async def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split`` (negative counts from the end)."""
        env, cls = self._class(env_name)
        what = f"task({env!r}, {split!r}, {index!r})"
        self._check_split(env, cls, split, what)

        async def get_task() -> Any:
            try:
                return await _sdk.sdk.run_user_callable(cls.get_task, split, index)
            except IndexError as exc:
                raise Refused(400, "Invalid index") from exc

        task = await self._run(get_task(), what, env)
        return dict(parse(dict[str, Any], json_out(task), what=what, where=LOCATION))

    async def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        """Tasks ``start:stop`` of ``split``, with Python slice rules."""
        env, cls = self._class(env_name)
        what = f"task_range({env!r}, {split!r}, {start!r}, {stop!r})"
        self._check_split(env, cls, split, what)

        async def get_range() -> Any:
            try:
                return await _sdk.sdk.run_user_callable(cls.get_task_range, split, start, stop)
            except IndexError as exc:
                raise Refused(400, "Invalid index range") from exc

        tasks = await self._run(get_range(), what, env)
        return parse(list[dict[str, Any]], json_out(tasks), what=what, where=LOCATION)

    # -- sessions -----------------------------------------------------------------------

    async def create_session(self, env_name: str, **kwargs: Unpack[SessionArgs]) -> str:
        """Open a session (one episode) for a task; returns its id (see ``SessionArgs``).

        As on the server the instance is built here and ``setup()`` runs in the
        background: a failed setup surfaces as OrsServerError on the session's next
        request. ``toolset`` binds a session toolset as the server does (an unknown
        name: OrsRequestError listing the known ones).
        """
        check_session_args(kwargs)
        task_spec, split, index = kwargs.get("task_spec"), kwargs.get("split"), kwargs.get("index")
        env, cls = self._class(env_name)
        what = f"create a {env} session"
        plain_secrets = secret_values(kwargs.get("secrets"))  # no egress proxy here
        if task_spec is not None:
            try:
                task = json_in(task_spec)
            except NotJSON as exc:
                raise not_json("task_spec", exc) from None
            if not isinstance(task, dict):
                raise TypeError(f"task_spec must be a mapping, got {type(task_spec).__name__}")
        else:
            task = None
            assert split is not None
            self._check_split(env, cls, split, what)
        sid = str(uuid.uuid4())
        session = await self._run(
            open_session(cls, env, task, split, index, plain_secrets, kwargs.get("toolset")),
            what, env, sid,
        )
        self._sessions[sid] = session
        return sid

    async def prompt(self, env_name: str, session_id: str) -> list[Block]:
        """The first observation, as blocks. Ask once per episode."""
        session = self._session(env_name, session_id)
        blocks = await self._run(
            session.prompt(), f"prompt of {session.env_name}", env_name, session_id
        )
        return [to_block(b) for b in blocks]

    async def messages(self, env_name: str, session_id: str) -> list[Message]:
        """The prompt as a role-tagged conversation."""
        session = self._session(env_name, session_id)
        what = f"messages of {session.env_name}"
        messages = await self._run(session.messages(), what, env_name, session_id)
        data = [model_json(m) for m in messages]
        return parse(list[Message], data, what=what, where=LOCATION)

    async def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        """Shared tools plus this task's own tools (``list_task_tools``)."""
        session = self._session(env_name, session_id)
        what = f"task tools of {session.env_name}"
        listed = await self._run(session.task_tools(), what, env_name, session_id)
        return parse(ListToolsOutput, listed.model_dump(mode="json"), what=what, where=LOCATION)

    async def call(
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
            args = json_in(arguments if type(arguments) is dict else dict(arguments))
        except NotJSON as exc:
            raise not_json(f"the arguments of tool call {name!r}", exc) from None
        try:
            if session.ready:
                result = await dispatch(session.env, name, args, session.toolset)
            else:
                result = await session.call(name, args)
        except Refused as exc:
            raise _refusal(exc, f"tool call {name!r}", env_name, session_id, name) from None
        except Exception as exc:
            raise OrsToolError(
                f"tool call {name!r} raised: {exc}. The tool's own code failed; "
                "this is a bug in the environment, not the agent",
                server=LOCATION, env_name=env_name, session_id=session_id, tool=name,
            ) from exc
        return call_result(result.root)

    async def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> list[GroupScore]:
        """Score candidate transcripts (``{"messages": [...], "metadata": ...}``), index-aligned.

        Messages may be dicts or ``ors_gym.protocol.Message`` objects. Raises
        OrsRequestError if the environment does not implement group scoring.
        """
        session = self._session(env_name, session_id)
        env = session.env_name
        if not supports_score_group(type(session.env)):
            raise _http_error(  # a 404 about the environment, not the session
                404,
                f"score_group was refused (404): Environment {env!r} does not implement "
                "score_group",
                env_name=env_name,
            ).with_context(session_id=session_id)
        try:
            payload = _sdk.sdk.ScoreGroup.model_validate(
                {"candidates": json_in([dict(c) for c in candidates])}
            )
        except (ValueError, NotJSON) as exc:
            raise _http_error(
                422, f"score_group was refused (422): {exc}",
                env_name=env_name, session_id=session_id,
            ) from None
        try:
            scores = await session.score_group(list(payload.candidates))
        except Refused as exc:
            raise _refusal(exc, "score_group", env_name, session_id, None) from None
        except Exception as exc:
            raise OrsToolError(
                f"score_group raised: {exc}. The environment's own code failed",
                server=LOCATION, env_name=env_name, session_id=session_id,
            ) from exc
        return parse(list[GroupScore], [s.model_dump(mode="json") for s in scores],
                     what="score_group result", where=LOCATION)

    async def delete_session(self, session_id: str) -> None:
        """End the session: cancel a running setup, run ``teardown()``; idempotent."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await session.close()

    async def ping(self, session_id: str) -> None:
        """Raises OrsSessionExpired once the session is gone (nothing expires in-process)."""
        if session_id not in self._sessions:
            raise _gone(session_id, None, None, "404: Active environment not found")

    async def probe(self) -> None:
        """In-process environments are always reachable."""

    async def aclose(self) -> None:
        """Tear down every open session; safe to call twice, and the backend stays usable."""
        sessions = list(self._sessions.values())
        self._sessions = {}
        if sessions:
            await close_all(sessions)

    # -- helpers -------------------------------------------------------------------------

    def _class(self, env_name: str) -> tuple[str, Any]:
        cls = self._classes.get(env_name) if isinstance(env_name, str) else None
        if cls is not None:
            return env_name, cls
        if not isinstance(env_name, str) or not env_name:
            raise OrsRequestError(
                f"environment name must be a non-empty str, got {env_name!r}",
                server=LOCATION,
            )
        key = env_name.lower()
        cls = self._classes.get(key)
        if cls is None:
            raise _http_error(
                404,
                f"unknown environment {env_name!r}; this backend hosts: "
                f"{', '.join(self._classes)}",
                env_name=env_name,
            )
        return key, cls

    def _check_split(self, env: str, cls: Any, split: str, what: str) -> None:
        names = split_names(cls)
        if split not in names:
            raise _http_error(
                400,
                f"{what} was refused (400): Invalid split; {env} has splits: "
                f"{', '.join(map(str, names))}",
                env_name=env,
            )

    def _session(self, env_name: str, session_id: str, tool: str | None = None) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            if not isinstance(env_name, str) or env_name not in self._classes:
                self._class(env_name)  # an unknown environment is the clearer error
            raise _gone(session_id, env_name, tool, "404: Active environment not found")
        if env_name != session.env_name and (
            not isinstance(env_name, str) or env_name not in self._classes
        ):
            self._class(env_name)  # the server ignores a known but different name; so do we
        return session

    async def _run(
        self, coro: Coroutine[Any, Any, _T], what: str, env_name: str,
        session_id: str | None = None,
    ) -> _T:
        """Await ``coro``; server refusals and failures become the errors HTTP would give."""
        try:
            return await coro
        except Refused as exc:
            raise _refusal(exc, what, env_name, session_id, None) from None
        except Exception as exc:
            raise _http_error(
                500, _server_failure(what, exc_detail(exc)),
                env_name=env_name, session_id=session_id,
            ) from exc


def _gone(session_id: str, env_name: str | None, tool: str | None, why: str) -> OrsError:
    return OrsSessionExpired(
        f"session {session_id} is gone (deleted, or its backend was closed); "
        f"call reset() to start a new episode ({why})",
        server=LOCATION, env_name=env_name, session_id=session_id, tool=tool,
    )


def _http_error(
    status: int, message: str, *, env_name: str | None = None,
    session_id: str | None = None, tool: str | None = None,
) -> OrsError:
    """The error the HTTP backend raises for the status the server would answer."""
    return error_for_status(
        status, message, server=LOCATION, env_name=env_name, session_id=session_id, tool=tool
    )


def _server_failure(what: str, detail: str) -> str:
    return (
        f"{what} failed in the environment (500): {detail}; this is a bug or a failed "
        "setup() in the environment; running it again gives the same answer"
    )


def _refusal(
    exc: Refused, what: str, env_name: str, session_id: str | None, tool: str | None
) -> OrsError:
    """The error the HTTP backend raises for the status the server would have answered."""
    if exc.status in (404, 410) and session_id is not None:
        return _gone(session_id, env_name, tool, f"{exc.status}: {exc.detail}")
    message = (
        _server_failure(what, exc.detail) if exc.status >= 500
        else f"{what} was refused ({exc.status}): {exc.detail}"
    )
    return _http_error(exc.status, message, env_name=env_name, session_id=session_id, tool=tool)
