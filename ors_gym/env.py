"""``OrsEnv``: one ORS environment as a ``gymnasium.Env``.

A thin blocking face of ``AsyncOrsEnv`` (the data flow of a step is drawn in
``ors_gym/async_env.py``): ``reset`` and ``step`` run the core's coroutines over
an async backend on its blocking face's runtime (``ors_gym._runtime``: the
calling thread drives a private loop), and add what only Gymnasium needs:
spaces, seeding through ``np_random``, rendering, the spec. The adapter never
builds a URL; the backend never sees a space.
"""

from __future__ import annotations

import warnings
import weakref
from functools import partial
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from ors_gym import _cleanup
from ors_gym._runtime import Runtime
from ors_gym.async_env import AsyncOrsEnv, class_env_name
from ors_gym.backends.base import Backend
from ors_gym.backends.factory import async_face_of, make_backend
from ors_gym.catalog import check_reset_options
from ors_gym.formats import tools_as
from ors_gym.observations import observation_space
from ors_gym.protocol import ListToolsOutput, Message, TerminalToolSpec
from ors_gym.secret import EnvSpecRedactor
from ors_gym.settings import EnvSettings
from ors_gym.spaces import ToolCallSpace
from ors_gym.turn import Elapsed, Turn

__all__ = ["Elapsed", "OrsEnv", "make_backend"]

#: ``EnvSettings`` fields an ``OrsEnv`` answers as attributes of its own.
_SETTING_ATTRIBUTES = frozenset({
    "max_steps", "no_tool_call", "on_error", "error_reward", "image_size",
    "max_image_pixels", "max_calls_per_step",
})


class OrsEnv(gym.Env[dict[str, Any], Any]):
    """An ORS environment as a Gymnasium environment.

    Observations are ``{"text": str, "images": tuple[np.ndarray, ...]}``; actions
    are text (a message, or tool calls written in common LLM formats) or a dict
    ``{"tool_calls": [{"name": ..., "arguments": {...}}], "message": ...}``. A
    session (one episode) opens at ``reset`` and is deleted at the next ``reset``
    or ``close``. Construction only discovers the environment's tools.

    Where: ``base_url`` (an ORS server), ``env_class`` (an SDK environment in this
    process) or ``backend`` (a blocking ``Backend`` such as ``HttpBackend`` or
    ``LocalBackend``, which may be shared and is not closed with the env).
    Options: those of ``ors_gym.EnvSettings`` (``split``, ``max_steps``,
    ``no_tool_call``, ``on_error``, ``image_size``, ``api_key``, ``secrets``, ...),
    plus ``render_mode`` (``"ansi"``: the transcript; ``"rgb_array"``: the last image, or
    None with a warning while the environment has sent none).

    Stable-Baselines3 needs fixed spaces: wrap the env in ``ors_gym.wrappers``'
    ``DiscreteToolActions`` (actions) and ``TextVector``, ``ImageObservation`` or
    ``MetadataVector`` (observations) first; ``ors_gym.train.make_env`` does it.

    It runs ``AsyncOrsEnv``'s own ``reset`` and ``step`` coroutines on its
    backend's runtime, so the two mean the same. The step and observation options
    are read from ``settings``, also as attributes (``env.max_steps``).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    #: The spec gym.make used; api_key and secrets kwargs kept as Secret.
    spec = EnvSpecRedactor()

    def __init__(
        self,
        base_url: str | None = None,
        env_name: str | None = None,
        *,
        env_class: Any = None,
        backend: Backend | None = None,
        render_mode: str | None = None,
        **options: Any,
    ) -> None:
        settings = EnvSettings.from_options(options)
        if render_mode == "human":
            raise ValueError(
                "render_mode='human' is not supported: an ORS env has no window of its own. "
                "Use render_mode='rgb_array' and show the frames yourself (e.g. with "
                "matplotlib's imshow), or render_mode='ansi' for the text transcript"
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r}; choose one of {self.metadata['render_modes']}"
            )
        owns_backend = backend is None
        if backend is None:
            backend = make_backend(settings, base_url=base_url, env_class=env_class)
        self.backend = backend
        if env_name is None and isinstance(env_class, str | type):
            env_name = class_env_name(env_class)  # known without asking: the class's name
        core_backend, self._runtime = async_face_of(backend)
        self._run = self._runtime.run
        self._core = AsyncOrsEnv(env_name=env_name, backend=core_backend, settings=settings)
        # Runs when the env is garbage-collected without close(): deferred to a worker
        # thread, since the collector may run it anywhere (see ors_gym._cleanup).
        self._owns = owns_backend
        self._finalizer = weakref.finalize(
            self, _cleanup.schedule,
            partial(_release, self._runtime, self._core, backend, owns_backend),
        )
        self.render_mode = render_mode
        self.observation_space = observation_space(settings.image_size)
        self._action_space: ToolCallSpace | None = None
        self._transcript: list[str] = []
        self._last_image: np.ndarray | None = None
        self._warned_no_image = False

    # -- settings ------------------------------------------------------------------------
    @property
    def settings(self) -> EnvSettings:
        return self._core.settings

    @property
    def split(self) -> str | None:
        """The split tasks are drawn from (known after the first reset if not given)."""
        return self._core.catalog.known_split

    def __getattr__(self, name: str) -> Any:
        # Reached only for names not found normally: the step and observation options,
        # read from ``settings`` (``env.max_steps`` is ``env.settings.max_steps``).
        if name in _SETTING_ATTRIBUTES:
            return getattr(self.settings, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- discovery -----------------------------------------------------------------------
    @property
    def env_name(self) -> str:
        """The environment's name on its server (the server's default if not given)."""
        return self._run(self._core.catalog.name())

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
        return self._run(self._core.discover())

    @property
    def tools(self) -> ListToolsOutput:
        """The current session's tools (task tools included), or the shared ones before reset."""
        if self._core.catalog.known_tools is None:
            self._run(self._core.discover())
        return self._core.tools

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
        return self._core.session_id

    def messages(self) -> list[Message]:
        """The task's prompt as a role-tagged conversation (``/messages`` where the server
        offers it, else the prompt as one user message); asked once per episode."""
        return self._run(self._core.messages())

    @property
    def prefetch_messages(self) -> bool:
        """Whether each reset also asks :meth:`messages`, in the reset's own round trip."""
        return self._core.prefetch_messages

    @prefetch_messages.setter
    def prefetch_messages(self, value: bool) -> None:
        self._core.prefetch_messages = bool(value)

    def default_split(self) -> str:
        """The split given, else ``train`` where the environment lists it, else its first."""
        return self._run(self._core.catalog.default_split())

    def num_tasks(self, split: str | None = None) -> int:
        return self._run(self._core.catalog.num_tasks(split))

    def task(self, index: int, split: str | None = None) -> dict[str, Any]:
        """Task ``index`` of ``split``: from the listed tasks, or ``/task`` for index-only envs."""
        return self._run(self._core.catalog.task(index, split))

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
        self._transcript = []
        self._last_image = None
        self._core.seed(self.np_random)
        observation, info = self._run(self._core.open(options))
        tools = self._core.tools
        self._action_space = self.action_space.with_tools(tools.tools, tools.terminal_tool)
        self._remember(observation, "prompt")
        return observation, info

    def step(
        self, action: Any
    ) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """Run the action's tool calls in order, stopping at the first that finishes."""
        core = self._core
        turn = core.plan(action)
        if self.render_mode is None:  # nothing to remember
            return self._run(core.run(turn))
        self._transcript.append(f"[agent] {_describe_action(turn)}")
        observation, reward, terminated, truncated, info = self._run(core.run(turn))
        self._remember(observation, "env")
        return observation, reward, terminated, truncated, info

    def render(self) -> Any:
        """``ansi``: the episode transcript; ``rgb_array``: the last image seen."""
        if self.render_mode == "ansi":
            return "\n".join(self._transcript)
        if self.render_mode == "rgb_array":
            if self._last_image is None and not self._warned_no_image:
                self._warned_no_image = True
                warnings.warn(
                    f"{self!r} has sent no image yet, so render() returns None; "
                    "render_mode='ansi' shows the text transcript",
                    stacklevel=2,
                )
            return self._last_image
        return None

    def close(self) -> None:
        """Delete the open session and release the backend this env created; safe twice."""
        if self._finalizer.detach() is not None:
            _release(self._runtime, self._core, self.backend, self._owns)

    def __repr__(self) -> str:
        return f"<OrsEnv {self._core.env_name or '?'} at {self.location}>"

    def __str__(self) -> str:
        return self.__repr__()

    def _repr_html_(self) -> str:
        """Jupyter's card: name, backend, splits, tools with parameters, terminal tool."""
        from ors_gym.viewer import env_html

        return env_html(self)

    # -- helpers ---------------------------------------------------------------------------
    def _remember(self, observation: dict[str, Any], who: str) -> None:
        if self.render_mode is None:
            return
        self._transcript.append(f"[{who}] {observation['text']}")
        if observation["images"]:
            self._last_image = observation["images"][-1]


def _release(runtime: Runtime, core: AsyncOrsEnv, backend: Backend, owns_backend: bool) -> None:
    """Delete the env's open session, and close its backend if the env made it."""
    try:
        runtime.run(core.end_session())
    finally:
        if owns_backend:
            backend.close()


def _describe_action(turn: Turn) -> str:
    parsed = turn.parsed
    parts = [f"{c.name}({c.arguments})" for c in parsed.tool_calls]
    if parsed.text:
        parts.insert(0, repr(parsed.text))
    return " ".join(parts) or "(empty)"
