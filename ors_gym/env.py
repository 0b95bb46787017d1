"""``OrsEnv``: one ORS environment as a ``gymnasium.Env``.

The data flow of a step::

    action (str | dict) -> actions.parse_action -> ToolCall list, or a plain message
      -> tool calls in order | the terminal tool | the no-tool-call policy
      -> backend.call -> RunToolSuccess | RunToolError (protocol models)
      -> observations.decode_blocks -> (obs, reward, terminated, truncated, info)

The adapter never builds a URL; the backend never sees a space.
"""

from __future__ import annotations

import copy
import logging
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Literal, SupportsFloat

import gymnasium as gym
import numpy as np

from ors_gym import _cleanup
from ors_gym._secret import Secret, redact_kwargs, reveal
from ors_gym._step import (
    RECOVERABLE,
    Elapsed,
    StepRules,
    Turn,
    check_reset_options,
    choose_task,
    reset_result,
)
from ors_gym.actions import ParsedAction, parse_action
from ors_gym.backends.base import Backend
from ors_gym.errors import (
    OrsError,
    OrsProtocolError,
    OrsRequestError,
)
from ors_gym.formats import as_action, tools_as
from ors_gym.observations import DEFAULT_MAX_PIXELS, observation_space
from ors_gym.protocol import (
    ListToolsOutput,
    TerminalToolSpec,
)
from ors_gym.spaces import ToolCallSpace

__all__ = ["Elapsed", "OrsEnv"]

logger = logging.getLogger("ors_gym")

NoToolCallPolicy = Literal["nudge", "terminate", "truncate", "error"]
OnErrorPolicy = Literal["raise", "truncate"]

class _Session:
    """The live session of an env, shared with its finaliser (which must not hold the env)."""

    def __init__(self, backend: Backend, owns_backend: bool) -> None:
        self.backend = backend
        self.owns_backend = owns_backend
        self.session_id: str | None = None

    def end(self) -> None:
        sid, self.session_id = self.session_id, None
        if sid is not None:
            try:
                self.backend.delete_session(sid)
            except OrsError as exc:  # the session may already be gone with its server
                logger.debug("could not delete session %s: %s", sid, exc)

    def release(self) -> None:
        self.end()
        if self.owns_backend:
            self.backend.close()


def make_backend(
    *,
    base_url: str | Sequence[str] | None = None,
    env_class: Any = None,
    api_key: str | Secret | None = None,
    timeout: float | None = None,
    **backend_kwargs: Any,
) -> Backend:
    """Build the backend: HTTP for ``base_url``, else in-process for ``env_class``.

    ``base_url`` wins when both are given, so ``gym.make("ors/GridWorld-v0",
    base_url=...)`` talks to a server instead of hosting the bundled class.
    """
    if base_url is not None:
        from ors_gym.backends.http import HttpBackend

        if not isinstance(base_url, str):
            raise TypeError(f"base_url must be a str, got {type(base_url).__name__}")
        kwargs = dict(backend_kwargs)
        if timeout is not None:
            kwargs["timeout"] = timeout
        return HttpBackend(base_url, api_key=reveal(api_key), **kwargs)
    if env_class is not None:
        from ors_gym.backends.local import LocalBackend

        return LocalBackend(env_class)
    raise ValueError(
        "OrsEnv needs an environment: pass base_url='http://host:port' for an ORS server, "
        "env_class=MyEnv (or 'module:Class') to host an SDK environment in this process, "
        "or use gym.make('ors/GridWorld-v0') for a bundled one"
    )


class OrsEnv(gym.Env[dict[str, Any], Any]):
    """An ORS environment as a Gymnasium environment.

    Observations are ``{"text": str, "images": tuple[np.ndarray, ...]}``; actions
    are text (a message, or tool calls written in common LLM formats) or a dict
    ``{"tool_calls": [{"name": ..., "arguments": {...}}], "message": ...}``. A
    session (one episode) opens at ``reset`` and is deleted at the next ``reset``
    or ``close``. Construction only discovers the environment's tools.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    _spec: Any = None

    def __init__(
        self,
        base_url: str | None = None,
        env_name: str | None = None,
        *,
        env_class: Any = None,
        backend: Backend | None = None,
        split: str | None = None,
        max_steps: int | None = None,
        max_episode_steps: int | None = None,
        api_key: str | Secret | None = None,
        secrets: Mapping[str, str | Secret] | None = None,
        no_tool_call: NoToolCallPolicy = "nudge",
        on_error: OnErrorPolicy = "raise",
        error_reward: float = 0.0,
        image_size: tuple[int, int] | None = None,
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        max_calls_per_step: int = 16,
        render_mode: str | None = None,
        timeout: float | None = None,
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        if no_tool_call not in ("nudge", "terminate", "truncate", "error"):
            raise ValueError(
                f"no_tool_call={no_tool_call!r}; choose 'nudge', 'terminate', 'truncate' or 'error'"
            )
        if on_error not in ("raise", "truncate"):
            raise ValueError(f"on_error={on_error!r}; choose 'raise' or 'truncate'")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r}; choose one of {self.metadata['render_modes']}"
            )
        if backend is None:
            backend = make_backend(
                base_url=base_url,
                env_class=env_class,
                api_key=api_key,
                timeout=timeout,
                **dict(backend_options or {}),
            )
            owns_backend = True
        else:
            owns_backend = False
        self.backend = backend
        self._session = _Session(backend, owns_backend)
        # Runs when the env is garbage-collected without close(): deferred to a worker
        # thread, since the collector may run it anywhere (see ors_gym._cleanup).
        self._finalizer = weakref.finalize(self, _cleanup.schedule, self._session.release)
        if env_name is None and base_url is not None and env_class is not None:
            env_name = _class_env_name(env_class)  # the bundled class, served remotely
        self._env_name = env_name.lower() if env_name else None
        self.split = split
        self.max_steps = max_steps if max_steps is not None else max_episode_steps
        self._secrets = {k: str(reveal(v)) for k, v in secrets.items()} if secrets else None
        self.no_tool_call = no_tool_call
        self.on_error = on_error
        self.error_reward = float(error_reward)
        self.image_size = image_size
        self.max_image_pixels = max_image_pixels
        self.max_calls_per_step = max_calls_per_step
        self.render_mode = render_mode

        self.observation_space = observation_space(image_size)
        self._action_space: ToolCallSpace | None = None
        self._class_tools: ListToolsOutput | None = None
        self._num_tasks: dict[str, int] = {}
        self._task_cache: dict[str, list[dict[str, Any]] | None] = {}

        self._tools: ListToolsOutput | None = None
        self._steps = 0
        self._transcript: list[str] = []
        self._last_image: np.ndarray | None = None

    # -- discovery -----------------------------------------------------------------
    @property
    def env_name(self) -> str:
        """The environment's name on its server (the server's default if not given)."""
        if self._env_name is None:
            names = self.backend.list_environments()
            if not names:
                raise OrsProtocolError("the server lists no environments", server=self.location)
            self._env_name = names[0]
        return self._env_name

    @property
    def location(self) -> str:
        return self.backend.location

    @property  # type: ignore[override]
    def action_space(self) -> ToolCallSpace:
        """Tool calls over the environment's tools (the current session's, after reset)."""
        if self._action_space is None:
            listed = self.class_tools
            self._action_space = ToolCallSpace(listed.tools, listed.terminal_tool)
        return self._action_space

    @action_space.setter
    def action_space(self, space: ToolCallSpace) -> None:
        self._action_space = space

    @property
    def class_tools(self) -> ListToolsOutput:
        """The environment's shared tools and terminal tool (no session needed)."""
        if self._class_tools is None:
            self._class_tools = self.backend.tools(self.env_name)
        return self._class_tools

    @property
    def tools(self) -> ListToolsOutput:
        """The current session's tools (task tools included), or the shared ones before reset."""
        return self._tools if self._tools is not None else self.class_tools

    def tools_as(self, fmt: str = "openai") -> list[dict[str, Any]]:
        """The session's tools (terminal tool hidden) in a model API's function-calling format.

        ``fmt`` is ``"openai"``, ``"anthropic"``, ``"openai_responses"`` or ``"json_schema"``.
        """
        return tools_as(self.tools, fmt)

    @property
    def terminal_tool(self) -> TerminalToolSpec | None:
        return self.tools.terminal_tool

    @property
    def session_id(self) -> str | None:
        return self._session.session_id

    def default_split(self) -> str:
        """``train`` where the environment lists it, else its first split."""
        if self.split is not None:
            return self.split
        splits = self.backend.splits(self.env_name)
        if not splits:
            raise OrsProtocolError(
                "the environment lists no task splits", server=self.location, env_name=self.env_name
            )
        names = [s.name for s in splits]
        self.split = "train" if "train" in names else names[0]
        return self.split

    def num_tasks(self, split: str | None = None) -> int:
        split = split or self.default_split()
        if split not in self._num_tasks:
            self._num_tasks[split] = self.backend.num_tasks(self.env_name, split)
        return self._num_tasks[split]

    def task(self, index: int, split: str | None = None) -> dict[str, Any]:
        """Task ``index`` of ``split``: from the listed tasks, or ``/task`` for index-only envs."""
        split = split or self.default_split()
        if split not in self._task_cache:
            try:
                self._task_cache[split] = self.backend.tasks(self.env_name, split)
            except OrsRequestError:
                self._task_cache[split] = None  # index-only environment: ask per task
        tasks = self._task_cache[split]
        if tasks is None:
            return self.backend.task(self.env_name, split, index)
        try:
            return copy.deepcopy(tasks[index])
        except IndexError:
            raise OrsRequestError(
                f"task index {index} is out of range: split {split!r} has {len(tasks)} tasks",
                server=self.location,
                env_name=self.env_name,
            ) from None

    # -- gymnasium API -------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Close the previous session and start one for a task.

        ``options``: ``{"task_spec": {...}}`` for a given task, ``{"index": i}`` for
        task ``i`` of the split, ``{"split": "test"}`` to draw from another split.
        Otherwise a task is drawn from the split with the env's seeded RNG.
        """
        super().reset(seed=seed)
        options = check_reset_options(options)
        self._session.end()
        self._tools = None
        self._steps = 0
        self._transcript = []
        self._last_image = None
        try:
            task_spec, split, index = choose_task(self, options, self.np_random)
            sid = self.backend.create_session(
                self.env_name,
                task_spec=task_spec if split is None else None,
                split=split,
                index=index,
                secrets=self._secrets,
            )
            self._session.session_id = sid
            prompt = self.backend.prompt(self.env_name, sid)
            self._tools = self.backend.task_tools(self.env_name, sid)
        except OrsError as exc:
            raise exc.with_context(
                server=self.location, env_name=self.env_name, session_id=self.session_id
            ) from None
        self.action_space.set_tools(self._tools.tools, self._tools.terminal_tool)
        observation, info = reset_result(
            prompt, self._tools, env_name=self.env_name, task_spec=task_spec, split=split,
            index=index, session_id=sid, image_size=self.image_size,
            max_image_pixels=self.max_image_pixels,
        )
        self._remember(observation, "prompt")
        return observation, info

    def step(
        self, action: Any
    ) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """Run the action's tool calls in order, stopping at the first that finishes."""
        sid = self.session_id
        if sid is None:
            raise OrsError(
                "step() called without an open session; call reset() first "
                "(after close() or a lost session, reset() starts a new episode)",
                server=self.location,
                env_name=self._env_name,
            )
        parsed = parse_action(as_action(action))
        self._steps += 1
        if self.render_mode is not None:
            self._transcript.append(f"[agent] {_describe_action(parsed)}")

        turn = Turn(parsed, self._rules(), self.tools, steps=self._steps,
                    env_name=self._env_name)
        try:
            while (call := turn.next_call()) is not None:
                start = time.perf_counter()
                try:
                    result = self.backend.call(self.env_name, sid, call.name, call.arguments)
                except OrsError as exc:
                    raise exc.with_context(tool=call.name) from exc.__cause__
                turn.record(call, result, time.perf_counter() - start)
        except RECOVERABLE as exc:
            exc.with_context(server=self.location, env_name=self.env_name, session_id=sid)
            if self.on_error == "raise":
                raise
            if turn.fail(exc):  # nothing left to delete, and trying would wait on a dead server
                self._session.session_id = None
        observation, reward, terminated, truncated, info = turn.finish()
        self._remember(observation, "env")
        return observation, reward, terminated, truncated, info

    def render(self) -> Any:
        """``ansi``: the episode transcript; ``rgb_array``: the last image seen."""
        if self.render_mode == "ansi":
            return "\n".join(self._transcript)
        if self.render_mode == "rgb_array":
            if self._last_image is None:
                return np.zeros((1, 1, 3), dtype=np.uint8)
            return self._last_image
        return None

    def close(self) -> None:
        """Delete the open session and release the backend this env created; safe twice."""
        if self._finalizer.detach() is not None:
            self._session.release()

    @property
    def spec(self) -> Any:
        """The env's spec; ``api_key`` and ``secrets`` kwargs are kept as ``Secret``."""
        return self._spec

    @spec.setter
    def spec(self, value: Any) -> None:
        if value is not None and getattr(value, "kwargs", None):
            from dataclasses import replace

            value = replace(value, kwargs=redact_kwargs(value.kwargs))
        self._spec = value

    def __repr__(self) -> str:
        return f"<OrsEnv {self._env_name or '?'} at {self.location}>"

    def __str__(self) -> str:
        return self.__repr__()

    # -- helpers ---------------------------------------------------------------------------
    def _rules(self) -> StepRules:
        """The settings a step's outcome depends on, for ``ors_gym._step.Turn``."""
        return StepRules(
            no_tool_call=self.no_tool_call,
            error_reward=self.error_reward,
            image_size=self.image_size,
            max_image_pixels=self.max_image_pixels,
            max_calls_per_step=self.max_calls_per_step,
            max_steps=self.max_steps,
        )

    def _remember(self, observation: dict[str, Any], who: str) -> None:
        if self.render_mode is None:
            return
        self._transcript.append(f"[{who}] {observation['text']}")
        if observation["images"]:
            self._last_image = observation["images"][-1]


def _class_env_name(env_class: Any) -> str:
    """The name a server gives ``env_class`` (a class or ``module:Class``): its class name."""
    if isinstance(env_class, str):
        return env_class.rpartition(":")[2]
    name = getattr(env_class, "name", None)
    return str(name()) if callable(name) else str(env_class.__name__)


def _describe_action(parsed: ParsedAction) -> str:
    parts = [f"{c.name}({c.arguments})" for c in parsed.tool_calls]
    if parsed.message:
        parts.insert(0, repr(parsed.message))
    return " ".join(parts) or "(empty)"
