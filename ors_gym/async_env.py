"""``AsyncOrsEnv``: one ORS environment, awaited; the core every env face drives.

The data flow of a step::

    action (str | dict) -> actions.parse_action -> ToolCall list, or a plain message
      -> turn.Turn: tool calls in order | the terminal tool | the no-tool-call policy
      -> await backend.call -> RunToolSuccess | RunToolError (protocol models)
      -> observations.decode_blocks -> (obs, reward, terminated, truncated, info)

``await env.reset()``, ``await env.step(action)`` and ``await env.close()``
mean exactly what ``OrsEnv``'s do (``OrsEnv`` runs these same coroutines), so
thousands of episodes can run on one event loop with ``asyncio.gather``. It
is its own class rather than ``areset``/``astep`` on ``OrsEnv``: a
``gymnasium.Env`` promises blocking methods, and an object whose every method
is awaited cannot be handed to code that expects one by mistake (httpx keeps
``Client`` and ``AsyncClient`` apart for the same reason).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, Unpack

import numpy as np
from gymnasium.utils import seeding

from ors_gym._weights import draw_index
from ors_gym.actions import AssistantTurn, parse_action
from ors_gym.backends.base import AsyncBackend, SessionArgs
from ors_gym.backends.factory import NO_ENVIRONMENT, make_async_backend
from ors_gym.catalog import Catalog, check_reset_options
from ors_gym.errors import OrsError
from ors_gym.formats import as_action, parse_output, tools_as
from ors_gym.protocol import ListToolsOutput, Message, TerminalToolSpec
from ors_gym.settings import EnvSettings, preflight
from ors_gym.turn import RECOVERABLE, Step, Turn, reset_result

__all__ = ["NO_ENVIRONMENT", "AsyncOrsEnv", "make_async_backend"]

logger = logging.getLogger("ors_gym")

#: Deletions of a cancelled episode's session tried before giving up (each interrupted
#: by one more cancellation).
_DELETE_TRIES_ON_CANCEL = 5
#: Seconds one such deletion may take (a server that does not answer must not hold up exit).
_DELETE_ON_CANCEL_S = 10.0

class AsyncOrsEnv:
    """An ORS environment whose ``reset``, ``step`` and ``close`` are awaited.

    Takes ``OrsEnv``'s arguments: ``base_url`` (an ORS server) or ``env_class``
    (an SDK environment hosted in this process) or ``backend`` (an
    ``AsyncBackend``, which may be shared by many envs and is then not closed
    with them), ``env_name``, and the options of ``ors_gym.EnvSettings`` (or
    ``settings=``, an ``EnvSettings``). ``catalog``: a ``Catalog`` to share
    discovery (name, tools, tasks) with other envs over the same backend.
    ``limiter``: an ``asyncio.Semaphore`` shared by many envs bounds how many
    of their requests are in flight at once (None: no bound).

    Cancelling a ``reset`` or ``step`` mid-call deletes the session it had open
    (the episode cannot be trusted to continue) before the cancellation goes on.
    """

    def __init__(
        self,
        base_url: str | None = None,
        env_name: str | None = None,
        *,
        env_class: Any = None,
        backend: AsyncBackend | None = None,
        limiter: asyncio.Semaphore | None = None,
        catalog: Catalog | None = None,
        settings: EnvSettings | None = None,
        **options: Any,
    ) -> None:
        if settings is not None and options:
            raise TypeError("give the env's options or a settings object, not both")
        self.settings = settings or EnvSettings.from_options(options)
        if backend is None:
            backend = make_async_backend(self.settings, base_url=base_url, env_class=env_class)
            self.owns_backend = True
        else:
            self.owns_backend = False
        self.backend = backend
        if env_name is None and isinstance(env_class, str | type):
            env_name = class_env_name(env_class)  # known without asking: the class's name
        self.catalog = catalog or Catalog.shared(backend, env_name, self.settings.split)
        self._limited = limiter is not None
        self.limiter: AbstractAsyncContextManager[Any] = (
            limiter if limiter is not None else nullcontext()
        )
        self.np_random, _ = seeding.np_random()
        self.session_id: str | None = None
        self.steps = 0
        self.last_action: AssistantTurn | None = None
        self._tools: ListToolsOutput | None = None
        self._messages: list[Message] | None = None
        #: Ask the prompt as messages too at each reset, in the same round trip (what a
        #: token-level episode renders), so that ``messages()`` asks nothing more.
        self.prefetch_messages = False
        self._closed = False

    # -- discovery -------------------------------------------------------------------------
    async def discover(self) -> ListToolsOutput:
        """Learn the environment's name and shared tools (no session); returns the tools."""
        return await self.catalog.tools()

    @property
    def env_name(self) -> str | None:
        """The environment's name, once given or discovered (``discover()``, ``reset()``)."""
        return self.catalog.known_name

    @property
    def location(self) -> str:
        return self.backend.location

    @property
    def tools(self) -> ListToolsOutput:
        """The session's tools (task tools included), or the shared ones before reset."""
        if self._tools is not None:
            return self._tools
        known = self.catalog.known_tools
        if known is None:
            raise RuntimeError(
                "the tools are not known yet: await env.discover() or env.reset() first"
            )
        return known

    @property
    def terminal_tool(self) -> TerminalToolSpec | None:
        return self.tools.terminal_tool

    def tools_as(self, fmt: str = "openai") -> list[dict[str, Any]]:
        """The session's tools (terminal tool hidden) in a model API's function-calling format.

        ``fmt`` is ``"openai"``, ``"anthropic"``, ``"openai_responses"`` or ``"json_schema"``.
        """
        return tools_as(self.tools, fmt)

    # -- episodes ---------------------------------------------------------------------------
    async def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Close the previous session and start one for a task; ``OrsEnv.reset``'s options."""
        if seed is not None:
            self.seed(seed)
        return await self.open(check_reset_options(options))

    def seed(self, seed: int | np.random.Generator | None) -> None:
        """Seed the generator that draws each reset's task: an int (or None) seeds a new
        one, a ``Generator`` is used as it is (``OrsEnv`` shares Gymnasium's)."""
        if isinstance(seed, np.random.Generator):
            self.np_random = seed
        else:
            self.np_random, _ = seeding.np_random(seed)

    def release_session(self) -> str | None:
        """Forget the open session without deleting it; its id, for the caller to delete
        (the vector env deletes it in the background while the next one opens)."""
        sid, self.session_id = self.session_id, None
        return sid

    async def _weighted(self, options: Mapping[str, Any]) -> Mapping[str, Any]:
        """The reset options with a task ``index`` drawn by ``task_weights``, unless they
        name a task already."""
        weights = self.settings.task_weights
        if weights is None or "index" in options or "task_spec" in options:
            return options
        split = options.get("split") or await self.catalog.default_split()
        count = await self.catalog.num_tasks(split)
        return {**options, "split": split,
                "index": draw_index(weights, count, self.np_random, split)}

    async def open(self, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``reset`` with checked options and the RNG as it is (what autoreset uses)."""
        self._check_open()
        await self.end_session()
        self._tools = None
        self._messages = None
        self.steps = 0
        self.last_action = None
        settings = self.settings
        try:
            async with self.limiter:
                await preflight(settings)  # before any session id is asked for
                name = await self.catalog.name()
                await self.catalog.tools()  # known from here on, whatever fails below
                if settings.task_weights is not None:
                    options = await self._weighted(options)
                task_spec, split, index = await self.catalog.choose_task(options, self.np_random)
                sid = await self._create(name, **_session_args(settings, SessionArgs(
                    task_spec=task_spec if split is None else None,
                    split=split,
                    index=index,
                    secrets=settings.plain_secrets(),
                )))
            async with self.limiter:
                # the messages too, in the same round trip, unless the server is known to
                # have no /messages: then they are the prompt, asked already
                if self.prefetch_messages and getattr(self.backend, "offers_messages", True):
                    prompt, tools, self._messages = await asyncio.gather(
                        self.backend.prompt(name, sid),
                        self.backend.task_tools(name, sid),
                        self.backend.messages(name, sid),
                    )
                else:
                    prompt, tools = await asyncio.gather(
                        self.backend.prompt(name, sid), self.backend.task_tools(name, sid)
                    )
                    if self.prefetch_messages:
                        self._messages = [Message(role="user", blocks=list(prompt))]
        except OrsError as exc:
            raise exc.with_context(
                server=self.location, env_name=self.env_name, session_id=self.session_id
            ) from None
        except asyncio.CancelledError:
            await self._abandon()
            raise
        self._tools = tools
        return reset_result(
            prompt, tools, env_name=name, task_spec=task_spec, split=split, index=index,
            session_id=sid, image_size=settings.image_size,
            max_image_pixels=settings.max_image_pixels,
        )

    async def _create(self, name: str, **kwargs: Unpack[SessionArgs]) -> str:
        """``create_session``, finished even when the reset is cancelled meanwhile.

        A cancelled request would not stop the server from opening the session,
        and its id would never reach us: so the creation runs in a task of its
        own, and a cancellation waits for it (within the deletion's time bound)
        and deletes what it opened before going on.
        """
        create = asyncio.ensure_future(self.backend.create_session(name, **kwargs))
        try:
            self.session_id = await asyncio.shield(create)
        except asyncio.CancelledError:
            for _ in range(_DELETE_TRIES_ON_CANCEL):
                try:
                    async with asyncio.timeout(_DELETE_ON_CANCEL_S):
                        self.session_id = await asyncio.shield(create)
                    break
                except asyncio.CancelledError:
                    continue
                except TimeoutError:
                    create.cancel()
                    logger.warning("a session may be left open: its server did not answer "
                                   "its creation within %s s", _DELETE_ON_CANCEL_S)
                    break
                except Exception as exc:  # failed: no session, its id given back
                    logger.debug("a cancelled reset's session creation failed: %s", exc)
                    break
            raise  # open()'s handler deletes the session now known
        return self.session_id

    async def messages(self) -> list[Message]:
        """The task's prompt as a role-tagged conversation, asked once per episode.

        ``/messages`` where the server offers it (multi-turn prompts); elsewhere
        the prompt as one user message.
        """
        sid, name = self.session_id, self.env_name
        if sid is None or name is None:
            raise OrsError(
                "messages() needs an open session; call reset() first",
                server=self.location, env_name=name,
            )
        if self._messages is None:
            try:
                async with self.limiter:
                    self._messages = await self.backend.messages(name, sid)
            except OrsError as exc:
                raise exc.with_context(
                    server=self.location, env_name=name, session_id=sid
                ) from exc.__cause__
        return list(self._messages)

    def plan(self, action: Any) -> Turn:
        """The step ``action`` makes, before any I/O: parsed, checked and counted."""
        if self.session_id is None:
            raise OrsError(
                "step() called without an open session; call reset() first "
                "(after close() or a lost session, reset() starts a new episode)",
                server=self.location,
                env_name=self.env_name,
            )
        fmt = self.settings.tool_format
        parsed = parse_action(as_action(action)) if fmt is None else parse_output(
            action, fmt, self.tools_as
        )
        turn = Turn(parsed, self.settings, self.tools, steps=self.steps + 1,
                    env_name=self.env_name)
        self.steps += 1
        self.last_action = parsed
        return turn

    async def run(self, turn: Turn) -> Step:
        """Run a planned step's calls in order, stopping at the first that finishes."""
        sid, env_name, backend = self.session_id, self.env_name, self.backend
        assert sid is not None and env_name is not None
        try:
            while (call := turn.next_call()) is not None:
                start = time.perf_counter()
                try:
                    if self._limited:
                        async with self.limiter:
                            result = await backend.call(env_name, sid, call.name, call.arguments)
                    else:
                        result = await backend.call(env_name, sid, call.name, call.arguments)
                except OrsError as exc:
                    raise exc.with_context(tool=call.name) from exc.__cause__
                turn.record(call, result, time.perf_counter() - start)
        except RECOVERABLE as exc:
            exc.with_context(server=self.location, env_name=env_name, session_id=sid)
            if self.settings.on_error == "raise":
                raise
            if turn.fail(exc):  # nothing left to delete, and trying would wait on a dead server
                self.session_id = None
        except asyncio.CancelledError:
            await self._abandon()
            raise
        return turn.finish()

    async def step(self, action: Any) -> Step:
        """Run the action's tool calls in order; ``OrsEnv.step``'s result."""
        return await self.run(self.plan(action))

    async def end_session(self) -> None:
        """Delete the open session, if any (best effort: it may be gone with its server).

        A cancellation that cuts the ``/delete`` short (a task stopped while it gives
        its session back) must not leave the session open, its id held nowhere any
        more: the deletion is made again (``_delete_through``), then the cancellation
        goes on.
        """
        sid = self.release_session()
        if sid is None:
            return
        try:
            await self.backend.delete_session(sid)
        except OrsError as exc:
            logger.debug("could not delete session %s: %s", sid, exc)
        except asyncio.CancelledError:
            await self._delete_through(sid)
            raise

    async def close(self) -> None:
        """Delete the open session and close the backend this env made; safe twice."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.end_session()
        finally:
            if self.owns_backend:
                await self.backend.aclose()

    async def __aenter__(self) -> AsyncOrsEnv:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncOrsEnv {self.env_name or '?'} at {self.location}>"

    def _repr_html_(self) -> str:
        """Jupyter's card once the tools are known (``await env.discover()``), else the repr."""
        if self.catalog.known_tools is None and self._tools is None:
            from html import escape

            return f"<code>{escape(repr(self))}</code> (await env.discover() to list its tools)"
        from ors_gym.viewer import env_html

        return env_html(self)

    # -- helpers ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this AsyncOrsEnv is closed; make a new one")

    async def _abandon(self) -> None:
        """On cancellation: delete the session before the cancellation goes on.

        The delete runs in this task and starts over when a further cancellation
        interrupts it: ``asyncio.run`` cancels every task still running once its
        main task ends (a ``gather`` ends at its first cancelled child), and then
        waits for them. A shielded delete in a task of its own would be cancelled
        there too. The caller re-raises the first cancellation afterwards.
        """
        sid = self.release_session()
        if sid is not None:
            await self._delete_through(sid)

    async def _delete_through(self, sid: str) -> None:
        """Delete ``sid`` despite cancellations (see ``_abandon``), within bounds."""
        for _ in range(_DELETE_TRIES_ON_CANCEL):
            try:
                async with asyncio.timeout(_DELETE_ON_CANCEL_S):
                    await self.backend.delete_session(sid)
                return
            except asyncio.CancelledError:
                continue
            except TimeoutError:
                logger.warning("session %s was left open: its server did not answer its "
                               "deletion within %s s (an HTTP backend deletes it again when "
                               "closed)", sid, _DELETE_ON_CANCEL_S)
                return
            except OrsError as exc:
                logger.debug("could not delete session %s: %s", sid, exc)
                return
        logger.warning("session %s was left open: its deletion was cancelled %d times (an "
                       "HTTP backend deletes it again when closed)", sid, _DELETE_TRIES_ON_CANCEL)


def _session_args(settings: EnvSettings, args: SessionArgs) -> SessionArgs:
    """``args`` with the keywords only some backends take, added only when set."""
    if settings.toolset is not None:
        args["toolset"] = settings.toolset
    if settings.env_overrides is not None:
        args["env_overrides"] = settings.plain_env_overrides()
    return args


def class_env_name(env_class: Any) -> str:
    """The name a server gives ``env_class`` (a class or ``module:Class``): its class name."""
    if isinstance(env_class, str):
        return env_class.rpartition(":")[2].lower()
    name = getattr(env_class, "name", None)
    return str(name() if callable(name) else env_class.__name__).lower()
