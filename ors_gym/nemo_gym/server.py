"""``OrsResourcesServer``: any ORS environment as a NeMo Gym resources server.

NeMo Gym's agents seed a session (``POST /seed_session``, the session in a
cookie), call tools (``POST /<tool>``), ask for the reward (``POST /verify``) and,
in 0.7.0's session contract, close it (``POST /close_session``). Each NeMo Gym
session is one ORS episode (``_episode.Episodes``) over one backend shared by the
whole process, run on the server's own event loop (a ``Runtime``): a route hands
its work there from a worker thread, so no set-up depends on the loop or the
lifespan of the app that serves it (NeMo Gym's contract checker gives each request
a loop of its own).

This module does not use ``from __future__ import annotations``: FastAPI reads a
route's body type from its annotations, which NeMo Gym's ``verify`` wrapper
resolves in its own module's namespace, where a string annotation names nothing.
"""

import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from fastapi import Body, FastAPI, HTTPException, Request
from fastapi.responses import PlainTextResponse
from nemo_gym.base_resources_server import (
    BaseMultiRewardVerifyResponse,
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
    SimpleResourcesServer,
)
from nemo_gym.openai_utils import NeMoGymResponse
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from ors_gym._runtime import Runtime
from ors_gym.errors import OrsError
from ors_gym.nemo_gym._episode import Episodes, SeedRefused, Verdict, failure_kind

__all__ = [
    "OrsResourcesServer",
    "OrsResourcesServerConfig",
    "OrsSeedSessionRequest",
    "OrsVerifyRequest",
    "OrsVerifyResponse",
    "final_answer",
]

logger = logging.getLogger("ors_gym")

_T = TypeVar("_T")

#: The server's own routes: a tool of one of these names could not be reached.
_RESERVED = frozenset({"seed_session", "close_session", "verify", "aggregate_metrics",
                       "reverify_mode", "mcp"})


class OrsResourcesServerConfig(BaseResourcesServerConfig):
    """Which ORS environment the server serves, as ``gymnasium.make`` names it.

    ``env_id``: a registered id (``ors/Counter-v0``); ``ors/Remote-v0`` (the default)
    with ``base_url`` (and ``env_name``) for an ORS server, ``deployment`` for a hosted
    OpenReward environment, or ``env_class`` (``module:Class``) for an SDK environment
    hosted in this process. ``env_kwargs``: any other ``make`` option (``timeout``,
    ``max_steps``, ``secrets``...). ``on_prompt_mismatch``: ``refuse`` a row whose prompt
    no longer matches its task's live prompt (HTTP 409), or ``flag`` it in the verdict.
    """

    env_id: str = "ors/Remote-v0"
    base_url: str | None = None
    env_name: str | None = None
    deployment: str | None = None
    env_class: str | None = None
    # may hold credentials (``secrets``, an ``api_key``): never shown in a repr or a log
    env_kwargs: dict[str, Any] = Field(default_factory=dict, repr=False)
    on_prompt_mismatch: Literal["refuse", "flag"] = "refuse"

    @model_validator(mode="after")
    def _names_an_environment(self) -> "OrsResourcesServerConfig":
        where = (self.base_url, self.deployment, self.env_class)
        if self.env_id == "ors/Remote-v0" and all(value is None for value in where):
            raise ValueError(
                "the ORS resources server needs an environment: env_id (a registered id such "
                "as ors/Counter-v0), base_url (with env_name) for an ORS server, deployment "
                "for a hosted one, or env_class ('module:Class') to host one in this process")
        return self

    def make_kwargs(self) -> dict[str, Any]:
        """The ``gymnasium.make`` keyword arguments of the environment."""
        named = {"base_url": self.base_url, "env_name": self.env_name,
                 "deployment": self.deployment, "env_class": self.env_class}
        return {**self.env_kwargs, **{k: v for k, v in named.items() if v is not None}}


class OrsSeedSessionRequest(BaseSeedSessionRequest):
    """The legacy seed: a dataset row (its ``ors_*`` fields name the task)."""

    model_config = ConfigDict(extra="allow")


class OrsVerifyRequest(BaseVerifyRequest):
    """The verify body: the row, its ``responses_create_params`` and the agent's response."""

    model_config = ConfigDict(extra="allow")


class OrsVerifyResponse(BaseMultiRewardVerifyResponse):
    """The reward (the episode's return), its named parts, and the episode's record."""

    model_config = ConfigDict(extra="allow")

    ors_steps: int = 0
    ors_rewards: list[float] = Field(default_factory=list)
    ors_finished: bool = False
    ors_prompt_mismatch: bool = False


_SeedBody = Annotated[ResourcesSeedSessionRequest | OrsSeedSessionRequest,
                      Field(union_mode="left_to_right")]


def final_answer(response: NeMoGymResponse) -> str | None:
    """The text of the agent's final assistant message, or None when its response ends
    otherwise (a tool call, a tool result, nothing)."""
    if not response.output:
        return None
    last = response.output[-1]
    if getattr(last, "type", None) != "message" or getattr(last, "role", None) != "assistant":
        return None
    content = last.content
    if isinstance(content, str):
        return content
    return "".join(part.text for part in content if getattr(part, "type", None) == "output_text")


class OrsResourcesServer(SimpleResourcesServer):
    """Any ORS environment as a NeMo Gym resources server (see the module docstring).

    Routes: ``/seed_session`` (a legacy row, or 0.7.0's typed seed), one ``/<tool>``
    per tool (task tools too), ``/verify`` and an idempotent ``/close_session``. Its
    ORS sessions are released at verify and at close; ``close()`` releases them all.
    """

    ray_enabled = False
    config: OrsResourcesServerConfig
    _runtime: Runtime = PrivateAttr(default_factory=lambda: Runtime("ors-nemo-gym"))
    _episodes: Episodes | None = PrivateAttr(default=None)

    @property
    def episodes(self) -> Episodes:
        """The server's episodes, over its one backend (made at first use)."""
        if self._episodes is None:
            self._episodes = Episodes(self.config.env_id, self.config.make_kwargs(),
                                      on_prompt_mismatch=self.config.on_prompt_mismatch)
        return self._episodes

    async def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the server's own loop, from a worker thread."""
        return await anyio.to_thread.run_sync(self._runtime.run, coro)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        tools = self._runtime.run(self.episodes.env().discover())
        for spec in tools.tools:
            if spec.name in _RESERVED:
                raise ValueError(
                    f"the environment's tool {spec.name!r} has the name of a NeMo Gym route "
                    f"(/{spec.name}); rename the tool to serve this environment to NeMo Gym")
            app.post(f"/{spec.name}", response_class=PlainTextResponse,
                     summary=spec.description or spec.name)(self._tool_route(spec.name))
        # task tools (known once a session opens) and unknown names: the ORS answer
        app.post("/{tool_name}", response_class=PlainTextResponse)(self.call_tool)
        lifespan = app.router.lifespan_context

        @asynccontextmanager
        async def closing(app: FastAPI) -> AsyncIterator[Any]:
            async with lifespan(app) as state:
                yield state
            await anyio.to_thread.run_sync(self.close)

        app.router.lifespan_context = closing
        return app

    def _tool_route(self, name: str) -> Any:
        async def route(request: Request,
                        body: dict[str, Any] = Body(default_factory=dict)) -> PlainTextResponse:
            return await self.call_tool(name, request, body)

        route.__name__ = f"tool_{name}"
        return route

    async def seed_session(
        self, request: Request, body: _SeedBody,
    ) -> ResourcesSeedSessionResponse | BaseSeedSessionResponse:
        """Open the ORS session of the task the row (or ``task_data``) names."""
        if isinstance(body, ResourcesSeedSessionRequest):
            key = body.resources_session_id
            request.session[SESSION_ID_KEY] = key
            fields: dict[str, Any] = dict(body.task_data)
            identity: tuple[str, str] | None = (body.episode_id.model_dump_json(),
                                                body.task_id.model_dump_json())
        else:
            key = request.session[SESSION_ID_KEY]
            fields, identity = dict(body.model_extra or {}), None
        try:
            await self._run(self.episodes.seed(key, fields, identity))
        except SeedRefused as exc:
            raise HTTPException(exc.status, str(exc)) from None
        except OrsError as exc:
            logger.warning("seed_session: the ORS session could not open (%s): %s",
                           failure_kind(exc), exc)
            raise HTTPException(503, f"{failure_kind(exc)}: {exc}") from None
        if identity is not None:
            return ResourcesSeedSessionResponse(resources_session_id=key)
        return BaseSeedSessionResponse()

    async def call_tool(self, tool_name: str, request: Request,
                        body: dict[str, Any] = Body(default_factory=dict)) -> PlainTextResponse:
        """Run ``tool_name`` in the session's ORS episode; its result as text."""
        key = request.session[SESSION_ID_KEY]
        text = await self._run(self.episodes.call(key, tool_name, body))
        if text is None:
            return PlainTextResponse(
                f"No ORS episode is open for this session, so {tool_name} was not run: "
                "call /seed_session first.", status_code=400)
        return PlainTextResponse(text)

    async def verify(self, request: Request, body: OrsVerifyRequest) -> OrsVerifyResponse:
        """The episode's return; its final answer goes to the terminal tool first."""
        key = request.session[SESSION_ID_KEY]
        verdict = await self._run(self.episodes.grade(key, final_answer(body.response)))
        if verdict is None:
            verdict = Verdict(reward=0.0, components={}, steps=0, rewards=[], finished=False,
                              failure_kind="session_lost",
                              failure_reason="no ORS episode is open for this session: "
                              "seed_session first (a legacy session is verified once)")
        return OrsVerifyResponse(
            **body.model_dump(), reward=verdict.reward, reward_components=verdict.components,
            mask_sample=verdict.failure_kind is not None, failure_kind=verdict.failure_kind,
            failure_reason=verdict.failure_reason, ors_steps=verdict.steps,
            ors_rewards=verdict.rewards, ors_finished=verdict.finished,
            ors_prompt_mismatch=verdict.prompt_mismatch,
        )

    async def close_resources_session(
        self, body: ResourcesCloseSessionRequest,
    ) -> ResourcesCloseSessionResponse:
        """Release the session's ORS episode; later seeds of its id are refused."""
        await self._run(self.episodes.close(body.resources_session_id))
        return ResourcesCloseSessionResponse(resources_session_id=body.resources_session_id)

    def close(self) -> None:
        """Release every ORS session and close the backend; safe twice."""
        if self._episodes is not None:
            episodes, self._episodes = self._episodes, None
            self._runtime.close(episodes.aclose())
