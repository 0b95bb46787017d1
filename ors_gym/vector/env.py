"""``OrsVectorEnv``: N sessions of one ORS environment, stepped concurrently on one loop.

Each sub-env is an ``AsyncOrsEnv`` (the same core ``OrsEnv`` drives), and all
of them are awaited on ONE event loop, the env's ``Runtime``: over one shared
connection pool for servers (sessions round-robin over ``base_url=[...]``), or
on one ``AsyncLocalBackend`` for an in-process environment, with no thread
pool. N slow tools take as long as one, without N processes. ``step`` and
``reset`` run the loop in the calling thread (no thread hop); the steps
``send`` starts go on in the runtime's background driver until ``recv`` takes
them. What the sub-envs do on the loop is ``SubEnvs`` (``_running``); this
module is the Gymnasium face: arguments, spaces, batches.

Beyond ``step``, an envpool-style ``send(actions, env_ids)`` / ``recv(min_envs)``
pair returns whichever sub-envs finished first, so one slow tool does not stall
the batch. A failing session ends only its sub-env (truncated, with
``info["error"]``); so does a server that stops answering while others still
do (its sub-envs report ``server_unreachable`` until it is back, then
autoreset onto it); only the last server stopping raises. After an exception
from ``reset``, ``step`` or ``recv`` some sub-envs may have moved on while
others did not: call ``reset()`` to start over.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
from gymnasium import spaces as gym_spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ors_gym import _cleanup
from ors_gym._runtime import Runtime
from ors_gym.async_env import AsyncOrsEnv, class_env_name
from ors_gym.backends.base import AsyncBackend
from ors_gym.backends.factory import make_async_backend, make_async_backends
from ors_gym.catalog import Catalog, check_reset_options
from ors_gym.errors import OrsError
from ors_gym.observations import empty_observation, observation_space
from ors_gym.secret import EnvSpecRedactor
from ors_gym.settings import EnvSettings, preflight
from ors_gym.spaces import ToolCallSpace
from ors_gym.turn import Turn
from ors_gym.vector._args import (
    autoreset_mode_of,
    env_ids_of,
    reset_targets,
    seeds_for,
    server_urls,
    split_actions,
)
from ors_gym.vector._results import (
    Outcome,
    batch_infos,
    batch_outcomes,
    raise_first,
    stack_observations,
    tile_frames,
)
from ors_gym.vector._running import Plan, SubEnvs, release
from ors_gym.vector.env_fns import check_num_envs

__all__ = ["OrsVectorEnv"]


class OrsVectorEnv(VectorEnv):
    """N sessions of one ORS environment, stepped concurrently on one event loop.

    Takes ``OrsEnv``'s arguments (the options of ``ors_gym.EnvSettings``) plus
    ``num_envs`` (what ``gym.make_vec(id, num_envs=N,
    vectorization_mode="vector_entry_point")`` passes) and:

    - ``base_url``: one server URL, or a list of them (sessions round-robin);
      if ``env_class`` is given too (a registered bundled id), the server is
      used and ``env_class`` only names the environment;
    - ``autoreset_mode``: Gymnasium's ``NEXT_STEP`` (default), ``SAME_STEP``
      (``final_obs``/``final_info`` in the step's info) or ``DISABLED``;
    - ``on_error``: ``"truncate"`` (default) ends a sub-env whose session fails
      (server error, expired session, dropped stream) with ``truncated=True`` and
      ``info["error"]`` while the others go on; ``"raise"`` raises. ``OrsError``
      is raised when every sub-env fails in the same step;
    - a server that stops answering (a connection failure, then a failed
      ``/health`` probe) while other servers still answer ends only its own
      sub-envs: their step is truncated with ``info["error_reason"] ==
      "server_unreachable"`` (and ``info["error"]``), and each later step of
      theirs, an autoreset, reports the same (after one shared ``/health``
      probe per server and batch, so a dead server costs no retries) until
      the server answers again; the autoreset then opens a new session on it
      (with the default ``NEXT_STEP`` autoreset; under ``SAME_STEP`` the
      reopening raises). The other sub-envs step on meanwhile. When every
      server is down (or the only one), the step raises ``OrsConnectionError``
      naming them, and so does ``reset()`` while any server it needs is down;
    - ``max_connections``: bound on the pooled client's connections (None: none).

    Observations are batched as gymnasium batches the ``OrsEnv`` space:
    ``{"text": (str, ...), "images": ((array, ...), ...)}``; actions are a
    sequence of ``num_envs`` ``OrsEnv`` actions (``action_space`` is a
    ``Tuple`` of per-sub-env ``ToolCallSpace``, each following its task's
    tools); infos are dicts of arrays with ``_key`` masks.
    """

    metadata: dict[str, Any] = {
        "autoreset_mode": AutoresetMode.NEXT_STEP,
        "render_modes": ["rgb_array", "rgb_array_tiled", "ansi"],
    }
    #: The spec gym.make used; api_key, secrets and env_overrides kwargs kept as Secret.
    spec = EnvSpecRedactor()

    def __init__(
        self,
        num_envs: int = 1,
        base_url: str | Sequence[str] | None = None,
        env_name: str | None = None,
        *,
        env_class: Any = None,
        render_mode: str | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        max_connections: int | None = None,
        **options: Any,
    ) -> None:
        self.num_envs = check_num_envs(num_envs)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r}; choose one of {self.metadata['render_modes']}"
            )
        self.settings = settings = EnvSettings.from_options(options, on_error="truncate")
        self.autoreset_mode = autoreset_mode_of(autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode
        urls = server_urls(base_url)
        if urls is None and settings.remote:  # a hosted deployment: the SDK's session host
            from ors_gym.backends.http import hosted_location

            urls = [hosted_location()]
        if urls is None and env_class is None:
            raise ValueError(
                "OrsVectorEnv needs an environment: base_url='http://host:port' (or a list "
                "of such URLs) for ORS servers, or env_class=MyEnv (or 'module:Class') to "
                "host an SDK environment in this process"
            )
        if urls is not None and env_class is not None and env_name is None:
            env_name = class_env_name(env_class)
        self._runtime = Runtime(f"ors-vector-{id(self):x}")
        self._ended = [False] * self.num_envs  # each sub-env's last step ended its episode
        self._obs = [empty_observation() for _ in range(self.num_envs)]
        self._servers: list[AsyncBackend] = []
        self._close_pool: Callable[[], Awaitable[None]] | None = None
        try:
            if urls is not None:
                # Keep one idle connection per sub-env (and a few for discovery), so
                # batches reuse connections instead of reopening them.
                self._servers, self._close_pool = make_async_backends(
                    settings, urls, max_connections=max_connections,
                    idle_connections=self.num_envs + 4,
                )
            else:
                self._servers = [make_async_backend(settings, env_class=env_class)]
            catalog = Catalog(self._servers[0], env_name, settings.split)
            envs = [
                AsyncOrsEnv(backend=self._servers[i % len(self._servers)], catalog=catalog,
                            settings=settings)
                for i in range(self.num_envs)
            ]
            self._subenvs = SubEnvs(envs, self._servers, self.autoreset_mode)
            self._runtime.run(preflight(settings))  # before the discovery asks for an id
            tools = self._runtime.run(catalog.tools())
        except BaseException:
            release(self._runtime, self._servers, self._close_pool, None)
            raise
        self.envs = envs
        self.catalog = catalog
        self.env_name: str = catalog.known_name or ""
        self._subenvs.env_name = self.env_name
        self.single_observation_space = observation_space(settings.image_size)
        self.single_action_space = ToolCallSpace(tools.tools, tools.terminal_tool)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._finalizer = weakref.finalize(
            self, _cleanup.schedule,
            partial(release, self._runtime, self._servers, self._close_pool, self._subenvs),
        )

    # -- public attributes ---------------------------------------------------------------

    @property
    def servers(self) -> tuple[str, ...]:
        """Where the sub-envs' sessions live, one entry per server (round-robin)."""
        return tuple(s.location for s in self._servers)

    @property
    def session_ids(self) -> tuple[str | None, ...]:
        """Each sub-env's open session id (None before reset or after a lost session)."""
        return tuple(env.session_id for env in self.envs)

    @property
    def sub_env_servers(self) -> tuple[str, ...]:
        """The server of each sub-env."""
        return tuple(env.location for env in self.envs)

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Sub-envs sent actions whose results ``recv()`` has not returned yet."""
        return self._subenvs.in_flight

    def __repr__(self) -> str:
        where = ", ".join(self.servers) if getattr(self, "_servers", None) else "?"
        return f"OrsVectorEnv({getattr(self, 'env_name', '?')}, num_envs={self.num_envs}, {where})"

    # -- gymnasium API -------------------------------------------------------------------

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Open a new session in every sub-env (or those in ``options["reset_mask"]``).

        ``seed``: an int seeds sub-env ``i`` with ``seed + i``; a list gives one
        seed each. ``options``: one dict for every sub-env (``OrsEnv.reset``'s
        ``task_spec``/``index``/``split``, plus gymnasium's ``reset_mask``), or a
        list of ``num_envs`` dicts (or None), one per sub-env. Work in flight
        from ``send()`` for the reset sub-envs is cancelled.
        """
        self._check_open()
        seeds = seeds_for(seed, self.num_envs)
        ids, per_env = reset_targets(options, self.num_envs)
        checked: dict[int, dict[str, Any]] = {}
        for i in ids:
            try:
                checked[i] = check_reset_options(per_env[i])
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"reset options of sub-env {i}: {exc}") from None
        for i in ids:
            if seeds[i] is not None:
                self.envs[i].seed(seeds[i])
        results = self._runtime.run(self._subenvs.reset(ids, checked))
        outcomes = self._absorb(results)
        obs = stack_observations(self.single_observation_space, self._obs)
        return obs, batch_infos([(o.index, o.info) for o in outcomes], self.num_envs)

    def step(
        self, actions: Any
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with its action (an autoresetting one ignores it).

        The calling thread runs the loop until every sub-env is done (no thread hop).
        """
        self._check_open()
        if self._subenvs.in_flight:
            raise RuntimeError(
                f"step() while sub-envs {self.in_flight} are in flight after send(); "
                "recv() them first (or reset())"
            )
        plans = self._plans(range(self.num_envs), actions)
        outcomes = self._settled(self._runtime.run(self._subenvs.step(plans)))
        obs, rewards, terminated, truncated = self._batch(outcomes)
        infos = batch_infos([(o.index, o.info) for o in outcomes], self.num_envs)
        return obs, rewards, terminated, truncated, infos

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all) with ``actions``, one each.

        Returns at once; the runtime's background driver steps them meanwhile, and
        ``recv()`` returns the results as they finish. A sub-env may not be sent to
        again before ``recv()`` returned it.
        """
        self._check_open()
        ids = env_ids_of(env_ids, self.num_envs)
        busy = sorted(set(ids) & set(self._subenvs.in_flight))
        if busy:
            raise RuntimeError(
                f"sub-envs {busy} are still in flight; recv() their results before sending "
                "them new actions"
            )
        self._runtime.run(self._subenvs.launch(self._plans(ids, actions)), leave_driver=True)
        self._runtime.drive_in_background()

    def recv(
        self, min_envs: int = 1, max_envs: int | None = None, timeout: float | None = None
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Results of sub-envs in flight: at least ``min_envs`` (fewer if fewer are in
        flight) and at most ``max_envs`` (default all that have finished).

        The batch is in finishing order; ``info["env_id"]`` names the sub-envs.
        ``timeout``: seconds to wait at most, then TimeoutError with nothing taken.
        """
        self._check_open()
        in_flight = self._subenvs.in_flight
        if not in_flight:
            raise RuntimeError("recv() with no sub-env in flight; send() actions first")
        if min_envs < 1:
            raise ValueError(f"min_envs must be >= 1, got {min_envs}")
        cap = self.num_envs if max_envs is None else max_envs
        if cap < min_envs:
            raise ValueError(f"max_envs={max_envs} is below min_envs={min_envs}")
        at_least = min(min_envs, len(in_flight))
        try:
            taken = self._runtime.run(self._subenvs.take(at_least, cap, timeout),
                                      leave_driver=True)
        except TimeoutError:
            raise TimeoutError(
                f"recv(timeout={timeout}): fewer than the {at_least} sub-envs asked for "
                f"finished in time; sub-envs {self.in_flight} are still in flight (nothing "
                "was lost: call recv() again)"
            ) from None
        finally:
            if self._subenvs.in_flight:
                self._runtime.drive_in_background()
        results = [task.exception() or task.result() for _, task in taken]
        outcomes = self._settled(results)
        obs, rewards, terminated, truncated = self._batch(outcomes)
        infos = batch_infos(list(enumerate(o.info for o in outcomes)), len(outcomes))
        infos["env_id"] = np.array([o.index for o in outcomes], dtype=np.int64)
        return obs, rewards, terminated, truncated, infos

    def render(self) -> Any:
        """Each sub-env's latest frame, as gymnasium's vector envs render.

        ``rgb_array``: a tuple with each sub-env's last image (None for one that has
        shown none); ``rgb_array_tiled``: one image tiling them in a near-square grid
        (black where a sub-env has no image); ``ansi``: each sub-env's latest text.
        """
        if self.render_mode == "ansi":
            return tuple(obs["text"] for obs in self._obs)
        frames = tuple(obs["images"][-1] if obs["images"] else None for obs in self._obs)
        if self.render_mode == "rgb_array":
            return frames
        if self.render_mode == "rgb_array_tiled":
            return tile_frames(frames)
        return None

    def close_extras(self, **kwargs: Any) -> None:
        """Cancel work in flight, delete every session, close connections and the loop."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None and finalizer.detach() is not None:
            release(self._runtime, self._servers, self._close_pool, self._subenvs)

    # -- planning and results (caller's thread) ------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("OrsVectorEnv is closed; make a new one")

    def _plans(self, ids: Sequence[int], actions: Any) -> list[Plan]:
        """Each sub-env's step as a ``Turn``, or None where it autoresets instead."""
        batch = split_actions(actions, len(ids))
        return [(i, self._plan(i, action)) for i, action in zip(ids, batch, strict=True)]

    def _plan(self, i: int, action: Any) -> Turn | None:
        if self._ended[i]:
            if self.autoreset_mode is AutoresetMode.NEXT_STEP:
                return None
            raise RuntimeError(
                f"sub-env {i} ended and autoreset_mode is DISABLED; reset it with "
                "reset(options={'reset_mask': mask}) before stepping it"
            )
        env = self.envs[i]
        if env.session_id is None:
            raise RuntimeError(f"sub-env {i} has no open session; call reset() first")
        try:
            return env.plan(action)
        except OrsError as exc:
            exc.add_note(f"the action of sub-env {i}")
            raise

    def _settled(self, results: Sequence[Outcome | BaseException]) -> list[Outcome]:
        """The outcomes of a step or ``recv``, absorbed; raise the first failure among them
        (a whole-server failure before any other), or one if every sub-env failed."""
        outcomes = self._absorb(results)
        failed = [o for o in outcomes if o.failure is not None]
        if self.num_envs > 1 and len(failed) == self.num_envs:
            first = failed[0].failure
            assert first is not None
            raise OrsError(
                f"every sub-env failed in the same step, so the server is unusable; the "
                f"first error (sub-env {failed[0].index}): {first}. Fix the server, then "
                "call reset()",
                server=first.server, env_name=self.env_name,
            ) from first
        return outcomes

    def _absorb(self, results: Sequence[Outcome | BaseException]) -> list[Outcome]:
        """Record each sub-env's new observation, end flag and (after a reset) tools; then
        raise the first failure among ``results``, if any.

        New tools give a new batched action space: one already handed out stays as it was.
        """
        outcomes = [r for r in results if isinstance(r, Outcome)]
        ends = self.autoreset_mode is not AutoresetMode.SAME_STEP
        opened = []
        for o in outcomes:
            self._obs[o.index] = o.obs
            self._ended[o.index] = (o.terminated or o.truncated) and ends
            if o.tools is not None:
                opened.append(o)
        if opened:
            old = self.action_space.spaces  # type: ignore[attr-defined]
            subspaces = list(old)
            for o in opened:
                assert o.tools is not None
                subspaces[o.index] = old[o.index].with_tools(o.tools.tools, o.tools.terminal_tool)
            if any(new is not was for new, was in zip(subspaces, old, strict=True)):
                self.action_space = gym_spaces.Tuple(subspaces)
        if len(outcomes) < len(results):
            raise_first([r for r in results if isinstance(r, BaseException)])
        return outcomes

    def _batch(
        self, outcomes: Sequence[Outcome]
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
        return batch_outcomes(self.single_observation_space, outcomes)
