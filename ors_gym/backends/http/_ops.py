"""The ORS endpoints a backend offers, each written once as a sans-IO operation.

Every method returns an ``Op`` generator (see ``_steps``), driven by
``AsyncHttpBackend`` on asyncio (``HttpBackend`` is its blocking face), so the
requests, retries, errors and parsed results are written once and tested by
feeding bytes. What is remembered between calls (the server's environment
names, whether it has ``/messages``) is per backend. Wire details: the Open
Reward Standard's protocol description.

A hosted deployment is spoken to as the SDK client speaks to it: every request
carries ``X-Deployment`` and a session id issued by ``/create_session`` (an
ephemeral one, kept per backend, for discovery), and paths are prefixed by the
``variant`` or bare (the server redirects them to its first environment; once
that permanent redirect was seen, its target is used directly).
For a plain server the session id is a uuid4 made here, which the protocol
allows: it saves the ``/create_session`` round trip.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

from ors_gym.backends.base import SessionArgs, check_session_args, secret_values
from ors_gym.backends.http._calls import ToolCalls
from ors_gym.backends.http._exchange import Exchange
from ors_gym.backends.http._settings import Settings, Where, key_domains
from ors_gym.backends.http._steps import MISSING, Op
from ors_gym.errors import (
    OrsConnectionError,
    OrsError,
    OrsProtocolError,
    OrsRequestError,
    OrsSessionExpired,
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

__all__ = ["Ops"]

logger = logging.getLogger("ors_gym.http")


class Ops:
    """The ORS client protocol as sans-IO operations.

    Each public method returns an ``Op`` generator; ``AsyncHttpBackend`` runs it with
    ``send`` until ``StopIteration`` carries the result. JSON requests go through
    ``exchange`` (an ``Exchange``), tool calls through ``calls`` (a ``ToolCalls`` over it).
    """

    def __init__(self, settings: Settings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.exchange = Exchange(settings, clock)
        self.calls = ToolCalls(self.exchange)
        self.env_names: list[str] | None = None
        self.messages_missing = False
        #: A hosted deployment's ephemeral session id for discovery requests.
        self.discovery_sid: str | None = None

    @property
    def location(self) -> str:
        return self.settings.location

    # -- hosted deployments ----------------------------------------------------------------

    @property
    def default_name(self) -> str:
        """A hosted deployment's environment name: its variant, else the deployment."""
        s = self.settings
        return (s.variant or s.deployment or "").lower()

    def where(
        self, env_name: str | None = None, session_id: str | None = None, tool: str | None = None
    ) -> Where:
        s = self.settings
        if s.hosted and not env_name:
            env_name = s.deployment if s.variant is None else f"{s.deployment}:{s.variant}"
        return self.exchange.where(env_name, session_id, tool)

    @staticmethod
    def path(env: str, endpoint: str) -> str:
        """``/{env}/{endpoint}``, or the bare ``/{endpoint}`` for a deployment's default."""
        return f"/{env}/{endpoint}" if env else f"/{endpoint}"

    def _key_secrets(self) -> dict[str, tuple[str, list[str]]] | None:
        """A hosted session's copy of the user's key, as the SDK client sends it: the
        secrets ``api_key`` and ``OPENREWARD_API_KEY``, usable only on the platform's
        own hosts (its sandboxes and services act for the user with it)."""
        s = self.settings
        if not s.hosted or not s.api_key:
            return None
        scoped = (s.api_key, key_domains(s.location))
        return {"api_key": scoped, "OPENREWARD_API_KEY": scoped}

    def _discovery(self) -> Op[str | None]:
        """The session id discovery requests carry: None for a plain server."""
        if not self.settings.hosted:
            return None
        sid = self.discovery_sid
        if sid is None:
            sid = yield from self.exchange.new_session_id(self.where())
            self.discovery_sid = sid
        return sid

    def release_discovery(self, *, timeout: float | None = None) -> Op[None]:
        """Give the discovery session id back (see ``release``)."""
        sid, self.discovery_sid = self.discovery_sid, None
        if sid is not None:
            yield from self.release(sid, timeout=timeout)

    def release(self, session_id: str, *, timeout: float | None = None) -> Op[None]:
        """Give back a session id no session uses (``/delete_session``), retried as every
        request is; a failure in the end is logged, not raised."""
        try:
            yield from self.exchange.request(
                "POST", "/delete_session", what="release a session id",
                where=self.where(session_id=session_id), timeout=timeout)
        except OrsError as exc:
            logger.debug("release of session id %s failed: %s", session_id, exc.message)

    # -- discovery ---------------------------------------------------------------------------

    def _get(self, path: str) -> Op[Any]:
        return self.exchange.request("GET", path, what=f"GET {path}", where=self.where())

    def _discover(self, method: str, env: str, endpoint: str, body: Any = None) -> Op[Any]:
        """A discovery request; a hosted one carries the discovery session id, and is
        sent once more with a fresh id if the gateway no longer knows the old one."""
        path = self.path(env, endpoint)
        sid = yield from self._discovery()
        try:
            return (yield from self.exchange.request(method, path, what=f"{method} {path}",
                                                     where=self.where(env, sid), body=body))
        except OrsRequestError as exc:
            if sid is None or exc.status_code not in (404, 410) or (
                    "deployment not found" in exc.message.lower()):
                raise
            logger.debug("discovery session id %s refused (%s); asking for a new one",
                         sid, exc.message)
            if self.discovery_sid == sid:
                self.discovery_sid = None
            sid = yield from self._discovery()
            return (yield from self.exchange.request(method, path, what=f"{method} {path}",
                                                     where=self.where(env, sid), body=body))

    def health(self) -> Op[dict[str, Any]]:
        """``/health``: ``{"status": "ok"}`` when the server is up."""
        answer = yield from self._get("/health")
        return dict(parse(dict[str, Any], answer, what="/health answer", where=self.location))

    def version(self) -> Op[dict[str, Any]]:
        """``/version``: the server SDK's ``version`` and ``build_sha``."""
        answer = yield from self._get("/version")
        return dict(parse(dict[str, Any], answer, what="/version answer", where=self.location))

    def list_environments(self) -> Op[list[str]]:
        """Environment names, lower-cased; the first is the default. Cached.

        A hosted deployment is not asked (the SDK never asks it): its one name is
        its variant, else the deployment's name (bare paths, the server's default).
        """
        names = self.env_names
        if names is None and self.settings.hosted:
            names = self.env_names = [self.default_name]
        if names is None:
            answer = yield from self._get("/list_environments")
            names = parse(list[str], answer, what="/list_environments answer",
                          where=self.location)
            names = self.env_names = [name.lower() for name in names]
        return list(names)

    def env(self, env_name: str) -> Op[str]:
        """The path segment for ``env_name``; raises OrsRequestError if the server lacks it.

        The server redirects unknown names to its default environment, which would
        end in a generic 404, so names are checked against ``/list_environments``.
        """
        if not isinstance(env_name, str) or not env_name:
            raise OrsRequestError(
                f"environment name must be a non-empty str, got {env_name!r}",
                server=self.location,
            )
        key = env_name.lower()
        if self.settings.hosted:  # the deployment's default: bare paths, until redirected
            if key == self.settings.deployment.lower():  # type: ignore[union-attr]
                return self.exchange.default_segment or ""
            return key
        names = self.env_names
        if names is not None and key in names:  # the hot path: nothing to ask
            return key
        names = yield from self.list_environments()
        if key in names:
            return key
        self.env_names = None  # the server may have restarted with other environments
        names = yield from self.list_environments()
        if key in names:
            return key
        raise error_for_status(
            404, f"unknown environment {env_name!r}; this server has: "
            f"{', '.join(names) or '(none)'}", server=self.location, env_name=env_name,
        )

    def tools(self, env_name: str) -> Op[ListToolsOutput]:
        """The environment's shared tools and its terminal tool."""
        env = yield from self.env(env_name)
        answer = yield from self._discover("GET", env, "tools")
        return parse(ListToolsOutput, answer, what=f"{self.path(env, 'tools')} answer",
                     where=self.location)

    def splits(self, env_name: str) -> Op[list[Split]]:
        """The task splits, in the server's order."""
        env = yield from self.env(env_name)
        answer = yield from self._discover("GET", env, "splits")
        return parse(list[Split], answer, what=f"{self.path(env, 'splits')} answer",
                     where=self.location)

    def _post_field(self, env: str, endpoint: str, body: dict[str, Any], key: str) -> Op[Any]:
        what = f"POST {self.path(env, endpoint)}"
        answer = yield from self._discover("POST", env, endpoint, body)
        if not isinstance(answer, dict) or key not in answer:
            raise OrsProtocolError(
                f"malformed {what} answer: no {key!r} field", server=self.location, env_name=env
            )
        return answer[key]

    def tasks(self, env_name: str, split: str) -> Op[list[dict[str, Any]]]:
        """Every task of ``split``; raises OrsRequestError for index-only environments."""
        env = yield from self.env(env_name)
        tasks = yield from self._post_field(env, "tasks", {"split": split}, "tasks")
        return parse(list[dict[str, Any]], tasks, what=f"/{env}/tasks answer",
                     where=self.location)

    def num_tasks(self, env_name: str, split: str) -> Op[int]:
        """How many tasks ``split`` has."""
        env = yield from self.env(env_name)
        count = yield from self._post_field(env, "num_tasks", {"split": split}, "num_tasks")
        return int(parse(int, count, what=f"/{env}/num_tasks answer", where=self.location))

    def task(self, env_name: str, split: str, index: int) -> Op[dict[str, Any]]:
        """Task ``index`` of ``split`` (negative counts from the end)."""
        env = yield from self.env(env_name)
        task = yield from self._post_field(env, "task", {"split": split, "index": index}, "task")
        return dict(parse(dict[str, Any], task, what=f"/{env}/task answer", where=self.location))

    def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> Op[list[dict[str, Any]]]:
        """Tasks ``start:stop`` of ``split``, with Python slice rules."""
        env = yield from self.env(env_name)
        body = {"split": split, "start": start, "stop": stop}
        tasks = yield from self._post_field(env, "task_range", body, "tasks")
        return parse(list[dict[str, Any]], tasks, what=f"/{env}/task_range answer",
                     where=self.location)

    # -- sessions ----------------------------------------------------------------------------

    def session_id(self, env_name: str, **kwargs: Unpack[SessionArgs]) -> Op[str]:
        """A new session's id: issued by ``/create_session`` for a hosted deployment
        (which a failed ``create`` must give back: ``release``), else a uuid4 made here
        (see the module docstring). The arguments are checked first."""
        check_session_args(kwargs)
        overrides = kwargs.get("env_overrides")
        self.exchange.hide([*secret_values(kwargs.get("secrets")).values(),
                            *(overrides or {}).values()])
        env = yield from self.env(env_name)
        if not self.settings.hosted:
            return str(uuid.uuid4())
        return (yield from self.exchange.new_session_id(
            self.where(env), kwargs.get("secrets"), self._key_secrets(),
            body={"env": dict(overrides)} if overrides else None))

    def create(self, env_name: str, sid: str, **kwargs: Unpack[SessionArgs]) -> Op[None]:
        """Open session ``sid`` (from ``session_id``) for a task.

        ``toolset`` names a session toolset the server binds to the instance (sent
        as ``toolset_name``). ``/create`` runs the environment's constructor, so it
        may take up to ``setup_timeout``.
        """
        task_spec, secrets = kwargs.get("task_spec"), kwargs.get("secrets")
        env = yield from self.env(env_name)
        scoped = self._key_secrets()
        body: dict[str, Any] = {"env_name": env} if env else {}
        if task_spec is not None:
            body["task_spec"] = dict(task_spec)
        else:
            body.update(split=kwargs.get("split"), index=kwargs.get("index"))
        if kwargs.get("toolset") is not None:
            body["toolset_name"] = kwargs["toolset"]
        try:
            yield from self.exchange.request("POST", "/create",
                                             what=f"create a {env or self.default_name} session",
                                             where=self.where(env, sid), body=body, secrets=secrets,
                                             setup=True, scoped=scoped)
        except OrsRequestError as exc:
            # Only a resent /create whose first attempt got through meets our own uuid4.
            if exc.status_code != 400 or "already exists" not in exc.message:
                raise

    def _session_get(
        self, env: str, endpoint: str, session_id: str, setup: bool = False
    ) -> Op[Any]:
        path = self.path(env, endpoint)
        return self.exchange.request("GET", path, what=f"GET {path}",
                                     where=self.where(env, session_id), session=True, setup=setup)

    def prompt(self, env_name: str, session_id: str) -> Op[list[Block]]:
        """The first observation, as blocks; waits up to ``setup_timeout`` for the
        environment's ``setup()`` and ``get_prompt()``."""
        env = yield from self.env(env_name)
        answer = yield from self._session_get(env, "prompt", session_id, setup=True)
        return parse(list[Block], answer, what=f"{self.path(env, 'prompt')} answer",
                     where=self.location)

    def messages(self, env_name: str, session_id: str) -> Op[list[Message]]:
        """The prompt as a role-tagged conversation (``/prompt`` wrapped on old servers)."""
        env = yield from self.env(env_name)
        if not self.messages_missing:
            path = self.path(env, "messages")
            answer = yield from self.exchange.request(
                "GET", path, what=f"GET {path}",
                where=self.where(env, session_id), session=True,
                fallback=frozenset({404, 405}), setup=True,
            )
            if answer is not MISSING:
                return parse(list[Message], answer, what=f"{path} answer",
                             where=self.location)
        blocks = yield from self.prompt(env_name, session_id)  # OrsSessionExpired if the 404 was
        if not self.messages_missing:
            logger.debug("%s has no /messages; using /prompt from now on", self.location)
            self.messages_missing = True
        return [Message(role="user", blocks=list(blocks))]

    def task_tools(self, env_name: str, session_id: str) -> Op[ListToolsOutput]:
        """Shared tools plus this task's own tools."""
        env = yield from self.env(env_name)
        answer = yield from self._session_get(env, "task_tools", session_id)
        return parse(ListToolsOutput, answer, what=f"{self.path(env, 'task_tools')} answer",
                     where=self.location)

    def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> Op[CallResult]:
        """One tool call; agent mistakes are ``RunToolError``, a raising tool OrsToolError."""
        env = yield from self.env(env_name)
        answer = yield from self.calls.stream(
            self.path(env, "call"),
            {"name": name, "input": dict(arguments)},
            what=f"tool call {name!r}",
            where=self.where(env, session_id, name),
        )
        return parse(CallResult, answer, what=f"{self.path(env, 'call')} result",
                     where=self.location)

    def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> Op[list[GroupScore]]:
        """Score candidate transcripts, index-aligned."""
        env = yield from self.env(env_name)
        answer = yield from self.calls.stream(
            self.path(env, "score_group"),
            {"candidates": [dict(c) for c in candidates]},
            what="score_group",
            where=self.where(env, session_id),
        )
        if not isinstance(answer, dict) or "scores" not in answer:
            raise OrsProtocolError("malformed /score_group result: no 'scores' field",
                                   server=self.location, env_name=env, session_id=session_id)
        return parse(list[GroupScore], answer["scores"], what="/score_group result",
                     where=self.location)

    def delete(
        self, session_id: str, *, max_retries: int | None = None, timeout: float | None = None
    ) -> Op[None]:
        """End the session; a session (or server) already gone is not an error.

        A hosted session's id is then given back with ``/delete_session``, as the
        SDK client does, so the gateway can forget it: also when ``/delete``
        failed (its error is raised after the id is given back).
        """
        where = self.where(session_id=session_id)
        failed: OrsError | None = None
        for path, what in (("/delete", "delete the session"),
                           ("/delete_session", "release the session id")):
            if path == "/delete_session" and not self.settings.hosted:
                break
            try:
                yield from self.exchange.request("POST", path, what=what, where=where, session=True,
                                                 max_retries=max_retries, timeout=timeout)
            except (OrsSessionExpired, OrsConnectionError) as exc:
                logger.debug("%s of session %s skipped: %s", path, session_id, exc.message)
            except OrsError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def ping(
        self, session_id: str, *, max_retries: int | None = None, timeout: float | None = None
    ) -> Op[None]:
        """Keep the session alive; raises OrsSessionExpired once it is gone."""
        yield from self.exchange.request("POST", "/ping", what="ping the session",
                                         where=self.where(session_id=session_id), session=True,
                                         max_retries=max_retries, timeout=timeout)
