"""Vector environments over ORS sessions.

``OrsVectorEnv`` runs N sessions of one environment as a ``gymnasium.vector.VectorEnv``:
every sub-env's tool calls are awaited concurrently on ONE event loop (in a
background thread) over ONE pooled ``httpx.AsyncClient`` (``AsyncHttpBackend``),
so N slow tools take as long as one, without N processes. Sessions may be spread
round-robin over several servers (``base_url=[...]``). For an in-process
environment (``env_class``) the sub-envs share one ``LocalBackend``, called from a
thread pool (it has no async API; its private loop runs the calls concurrently).

Beyond ``step``, an envpool-style ``send(actions, env_ids)`` / ``recv(min_envs)``
pair returns whichever sub-envs finished first, so one slow tool does not
stall the batch. A failing session ends only its sub-env (truncated, with
``info["error"]``); a server that stops answering raises.

The step logic is ``OrsEnv``'s, shared through ``ors_gym._step``: a sub-env's
step gives the same observation, reward and info as ``OrsEnv.step``.

For gymnasium's own ``SyncVectorEnv`` / ``AsyncVectorEnv`` over ``OrsEnv``,
``make_env_fns`` gives picklable constructors that also work in spawned
workers. ``AsyncVectorEnv`` needs ``shared_memory=False`` for ``OrsEnv``'s own
observations (text and variable-length image tuples cannot live in fixed shared
buffers; gymnasium says so when asked), or wrappers with ``Box`` observations.

After an exception from ``reset``, ``step`` or ``recv`` some sub-envs may have
moved on while others did not: call ``reset()`` to start over.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar, cast

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from ors_gym import _cleanup
from ors_gym._secret import Secret, redact_kwargs, reveal
from ors_gym._step import (
    RECOVERABLE,
    StepRules,
    Turn,
    check_reset_options,
    choose_task,
    reset_result,
)
from ors_gym.actions import parse_action
from ors_gym.backends.base import Backend
from ors_gym.env import NoToolCallPolicy, OnErrorPolicy, OrsEnv
from ors_gym.errors import OrsConnectionError, OrsError
from ors_gym.formats import as_action
from ors_gym.observations import DEFAULT_MAX_PIXELS, empty_observation
from ors_gym.protocol import Block, CallResult, GroupScore, ListToolsOutput, Message, Split

__all__ = ["EnvFn", "OrsVectorEnv", "make_env_fns"]

logger = logging.getLogger("ors_gym")

_T = TypeVar("_T")

#: Sessions per connection pool of the shared client (see ``ShardedTransport``).
_SESSIONS_PER_SHARD = 2


# -- constructors for gymnasium's SyncVectorEnv / AsyncVectorEnv ----------------------------


Wrapper = Callable[[gym.Env[Any, Any]], gym.Env[Any, Any]]


class EnvFn:
    """A picklable ``() -> gym.Env`` making one sub-env of ``env_id`` with ``kwargs``.

    The id is resolved to its ``EnvSpec`` here, so a spawned ``AsyncVectorEnv``
    worker (whose gym registry is empty until something imports ors_gym) can
    build the env: unpickling this object imports ``ors_gym``, and the spec is
    carried along, so ids registered at run time (``register_server``) work too.
    ``wrappers`` are applied in order (classes, or picklable partials of them).
    """

    def __init__(
        self, env_id: str | EnvSpec, *, wrappers: Sequence[Wrapper] = (), **kwargs: Any
    ) -> None:
        self.spec = env_id if isinstance(env_id, EnvSpec) else gym.spec(env_id)
        self.wrappers = tuple(wrappers)
        self.kwargs = kwargs

    def __call__(self) -> gym.Env[Any, Any]:
        env = gym.make(self.spec, **self.kwargs)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env

    def __repr__(self) -> str:
        return f"EnvFn({self.spec.id!r}, **{redact_kwargs(self.kwargs)!r})"


def make_env_fns(
    env_id: str | EnvSpec, num_envs: int, *, wrappers: Sequence[Wrapper] = (), **kwargs: Any
) -> list[EnvFn]:
    """``num_envs`` constructors of ``env_id`` for ``SyncVectorEnv`` / ``AsyncVectorEnv``.

    Sessions open lazily in each sub-env (at its first ``reset``), so the
    constructors travel to ``fork`` and ``spawn`` workers alike.

    ``AsyncVectorEnv``'s ``shared_memory`` (on by default) needs fixed-size
    observations: an ``OrsEnv``'s (text, and a tuple of images of any number)
    cannot live in a shared buffer, and gymnasium refuses them with "disable
    ``shared_memory``". So pass ``shared_memory=False``, or ``wrappers`` that
    make the observation a ``Box`` (``ors_gym.wrappers.TextVector``,
    ``ImageObservation``, ``MetadataVector``), which shared memory takes.
    """
    _check_num_envs(num_envs)
    return [EnvFn(env_id, wrappers=wrappers, **kwargs) for _ in range(num_envs)]


def _check_num_envs(num_envs: Any) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    return int(num_envs)


# -- the event loop ---------------------------------------------------------------------------


class _LoopThread:
    """An asyncio loop running forever in a daemon thread; other threads submit to it."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            _finish_loop(self.loop)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the loop and wait for its result (from any other thread)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("OrsVectorEnv was called from its own event loop thread")
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("OrsVectorEnv is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=30)


def _finish_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What ``asyncio.run`` does on the way out: cancel tasks, flush generators and threads."""
    try:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


class _Mailbox:
    """Results handed from the loop thread to the caller, waking it once per batch.

    Waking the waiting thread for every finished sub-env would hand the GIL back
    and forth N times per step; instead ``take`` names how many it needs and
    ``put`` wakes it when that many have arrived.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self._want = 0
        self._ready = threading.Event()

    def put(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)
            if self._want and len(self._items) >= self._want:
                self._want = 0
                self._ready.set()

    def take(self, at_least: int, at_most: int) -> list[Any]:
        """Wait for ``at_least`` items, then take up to ``at_most`` in arrival order."""
        with self._lock:
            wait = len(self._items) < at_least
            if wait:
                self._want = at_least
                self._ready.clear()
        if wait:
            self._ready.wait()
        with self._lock:
            taken, self._items = self._items[:at_most], self._items[at_most:]
        return taken


# -- sessions, awaited ----------------------------------------------------------------------------


class _ThreadedBackend:
    """A blocking ``Backend`` awaited through a thread pool (one thread per concurrent call).

    Used for ``LocalBackend``: it has no async API, and calls from many threads
    run concurrently on its one private loop.
    """

    def __init__(self, backend: Backend, workers: int) -> None:
        self.backend = backend
        self.location = backend.location
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="ors-vector-local"
        )

    async def _call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, partial(fn, *args, **kwargs))

    async def create_session(self, env_name: str, **kwargs: Any) -> str:
        return await self._call(self.backend.create_session, env_name, **kwargs)

    async def prompt(self, env_name: str, session_id: str) -> list[Block]:
        return await self._call(self.backend.prompt, env_name, session_id)

    async def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        return await self._call(self.backend.task_tools, env_name, session_id)

    async def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> CallResult:
        return await self._call(self.backend.call, env_name, session_id, name, arguments)

    async def delete_session(self, session_id: str) -> None:
        await self._call(self.backend.delete_session, session_id)

    async def probe(self) -> None:
        """An in-process environment is always reachable."""

    async def aclose(self) -> None:
        await self._call(self.backend.close)
        self._pool.shutdown(wait=False)


class _Blocking:
    """The blocking ``Backend`` API over an ``AsyncHttpBackend`` on the vector env's loop.

    Discovery (tools, splits, tasks) goes through the template ``OrsEnv`` and
    this facade, over the same pooled client as the sessions. Never call it
    from the loop thread itself.
    """

    def __init__(self, backend: Any, loop: _LoopThread) -> None:
        self._backend = backend
        self._loop = loop
        self.location: str = backend.location

    def list_environments(self) -> list[str]:
        return self._loop.run(self._backend.list_environments())

    def tools(self, env_name: str) -> ListToolsOutput:
        return self._loop.run(self._backend.tools(env_name))

    def splits(self, env_name: str) -> list[Split]:
        return self._loop.run(self._backend.splits(env_name))

    def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        return self._loop.run(self._backend.tasks(env_name, split))

    def num_tasks(self, env_name: str, split: str) -> int:
        return self._loop.run(self._backend.num_tasks(env_name, split))

    def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        return self._loop.run(self._backend.task(env_name, split, index))

    def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        return self._loop.run(self._backend.task_range(env_name, split, start, stop))

    def create_session(self, env_name: str, **kwargs: Any) -> str:
        return self._loop.run(self._backend.create_session(env_name, **kwargs))

    def prompt(self, env_name: str, session_id: str) -> list[Block]:
        return self._loop.run(self._backend.prompt(env_name, session_id))

    def messages(self, env_name: str, session_id: str) -> list[Message]:
        return self._loop.run(self._backend.messages(env_name, session_id))

    def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        return self._loop.run(self._backend.task_tools(env_name, session_id))

    def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> CallResult:
        return self._loop.run(self._backend.call(env_name, session_id, name, arguments))

    def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> list[GroupScore]:
        return self._loop.run(self._backend.score_group(env_name, session_id, candidates))

    def delete_session(self, session_id: str) -> None:
        self._loop.run(self._backend.delete_session(session_id))

    def ping(self, session_id: str) -> None:
        self._loop.run(self._backend.ping(session_id))

    def close(self) -> None:
        """Nothing: the vector env closes the async backend itself."""


# -- the vector env ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Sub:
    """One sub-env: its server, RNG and session. Touched by the loop only while in flight."""

    index: int
    server: Any  # AsyncHttpBackend | _ThreadedBackend
    rng: np.random.Generator | None = None
    session_id: str | None = None
    tools: ListToolsOutput | None = None
    steps: int = 0
    ended: bool = False  # its last step terminated or truncated it
    obs: dict[str, Any] = field(default_factory=empty_observation)


@dataclass
class _Outcome:
    """What one sub-env's step (or autoreset) produced."""

    index: int
    obs: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    tools: ListToolsOutput | None = None  # set when the sub-env opened a new session
    failure: OrsError | None = None


class _InfoBatch:
    """Gymnasium's own ``VectorEnv._add_info``, for a batch of ``num_envs`` (maybe < N)."""

    _add_info: Any = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def _batch_infos(infos: Sequence[tuple[int, dict[str, Any]]], n: int) -> dict[str, Any]:
    """``(position, info)`` pairs batched into arrays of length ``n`` with ``_key`` masks,
    as gymnasium's vector envs batch them.

    Gymnasium types a key's array by the first value it meets, so ``index`` 2 in
    one sub-env and None in the next (a reset by ``task_spec``) would fail; keys
    whose values differ in type get an object array instead.
    """
    batch = _InfoBatch(n)
    out = _mixed_keys([info for _, info in infos], n)
    for position, info in infos:
        out = batch._add_info(out, info, position)
    return out


def _mixed_keys(infos: Sequence[Mapping[str, Any]], n: int) -> dict[str, Any]:
    """Object arrays (and empty masks) for the keys whose values differ in type."""
    out: dict[str, Any] = {}
    kinds: dict[str, set[type]] = {}
    for info in infos:
        for key, value in info.items():
            kinds.setdefault(key, set()).add(type(value))
    for key, types in kinds.items():
        if key == "final_obs":  # gymnasium keeps these as an object array already
            continue
        if dict in types and len(types) == 1:
            nested = _mixed_keys([i[key] for i in infos if isinstance(i.get(key), dict)], n)
            if nested:
                out[key] = nested
        elif len(types) > 1:
            out[key] = np.full(n, None, dtype=object)
            out[f"_{key}"] = np.zeros(n, dtype=np.bool_)
    return out


class OrsVectorEnv(VectorEnv):
    """N sessions of one ORS environment, stepped concurrently on one event loop.

    Takes ``OrsEnv``'s arguments plus ``num_envs`` (what ``gym.make_vec(id,
    num_envs=N, vectorization_mode="vector_entry_point")`` passes) and:

    - ``base_url``: one server URL, or a list of them (sessions round-robin);
      if ``env_class`` is given too (a registered bundled id), the server is
      used and ``env_class`` only names the environment;
    - ``autoreset_mode``: Gymnasium's ``NEXT_STEP`` (default), ``SAME_STEP``
      (``final_obs``/``final_info`` in the step's info) or ``DISABLED``;
    - ``on_error``: ``"truncate"`` (default) ends a sub-env whose session fails
      (server error, expired session, dropped stream) with ``truncated=True`` and
      ``info["error"]`` while the others go on; ``"raise"`` raises. Either way a
      whole-server failure raises: ``OrsConnectionError`` naming the server when
      a connection failure is followed by a failed ``/health`` probe, and
      ``OrsError`` when every sub-env fails in the same step;
    - ``max_connections``: bound on the pooled client's connections (None: none);
    - ``local_workers``: threads calling an in-process env (default ``num_envs``).

    Observations are batched as gymnasium batches the ``OrsEnv`` space:
    ``{"text": (str, ...), "images": ((array, ...), ...)}``; actions are a
    sequence of ``num_envs`` ``OrsEnv`` actions (``action_space`` is a
    ``Tuple`` of per-sub-env ``ToolCallSpace``, each following its task's
    tools); infos are dicts of arrays with ``_key`` masks.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}
    _spec: EnvSpec | None = None

    def __init__(
        self,
        num_envs: int = 1,
        base_url: str | Sequence[str] | None = None,
        env_name: str | None = None,
        *,
        env_class: Any = None,
        split: str | None = None,
        max_steps: int | None = None,
        max_episode_steps: int | None = None,
        api_key: str | Secret | None = None,
        secrets: Mapping[str, str | Secret] | None = None,
        no_tool_call: NoToolCallPolicy = "nudge",
        on_error: OnErrorPolicy = "truncate",
        error_reward: float = 0.0,
        image_size: tuple[int, int] | None = None,
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        max_calls_per_step: int = 16,
        render_mode: str | None = None,
        timeout: float | None = None,
        backend_options: Mapping[str, Any] | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        max_connections: int | None = None,
        local_workers: int | None = None,
    ) -> None:
        self.num_envs = _check_num_envs(num_envs)
        if render_mode is not None:
            raise ValueError(
                f"render_mode={render_mode!r}: OrsVectorEnv does not render; read the "
                "observations' text, or use OrsEnv(render_mode=...) for a single env"
            )
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = None
        urls = _server_urls(base_url)
        if urls is None and env_class is None:
            raise ValueError(
                "OrsVectorEnv needs an environment: base_url='http://host:port' (or a list "
                "of such URLs) for ORS servers, or env_class=MyEnv (or 'module:Class') to "
                "host an SDK environment in this process"
            )
        if urls is not None and env_class is not None and env_name is None:
            env_name = _class_name(env_class)
        self.on_error = on_error
        self._secrets = {k: str(reveal(v)) for k, v in secrets.items()} if secrets else None
        self._loop = _LoopThread(f"ors-vector-{id(self):x}")
        self._client: Any = None
        self._pending_deletes: set[asyncio.Task[None]] = set()
        self._tasks: dict[int, asyncio.Task[_Outcome]] = {}  # the loop's view of what runs
        self._inflight: dict[int, concurrent.futures.Future[_Outcome]] = {}
        self._done = _Mailbox()  # (index, future) of each finished sub-env
        self._discovery = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ors-vector-discovery"
        )
        servers: list[Any] = []
        discovery: Backend
        try:
            if urls is not None:
                discovery, servers = self._http_servers(
                    urls, api_key, timeout, dict(backend_options or {}), max_connections
                )
            else:
                from ors_gym.backends.local import LocalBackend

                local = LocalBackend(env_class)
                discovery = local
                servers = [_ThreadedBackend(local, local_workers or self.num_envs)]
            self._servers = servers
            # The template env does discovery (env name, splits, tasks, tools) and checks
            # the arguments exactly as OrsEnv does; it never opens a session.
            self._template = OrsEnv(
                env_name=env_name,
                backend=discovery,
                split=split,
                max_steps=max_steps,
                max_episode_steps=max_episode_steps,
                no_tool_call=no_tool_call,
                on_error=on_error,
                error_reward=error_reward,
                image_size=image_size,
                max_image_pixels=max_image_pixels,
                max_calls_per_step=max_calls_per_step,
            )
            self.env_name = self._template.env_name
            self.single_observation_space = self._template.observation_space
            self.single_action_space = self._template.action_space
        except BaseException:
            _release(self._loop, servers, self._client, None, self._discovery)
            raise
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._rules = StepRules(
            no_tool_call=no_tool_call,
            error_reward=float(error_reward),
            image_size=image_size,
            max_image_pixels=max_image_pixels,
            max_calls_per_step=max_calls_per_step,
            max_steps=self._template.max_steps,
        )
        self._subs = [_Sub(i, servers[i % len(servers)]) for i in range(self.num_envs)]
        self._finalizer = weakref.finalize(
            self, _cleanup.schedule,
            partial(_release, self._loop, servers, self._client, self._template, self._discovery),
        )

    def _http_servers(
        self,
        urls: list[str],
        api_key: str | Secret | None,
        timeout: float | None,
        options: dict[str, Any],
        max_connections: int | None,
    ) -> tuple[_Blocking, list[Any]]:
        from ors_gym.backends.async_http import AsyncHttpBackend, pooled_client

        if timeout is not None:
            options["timeout"] = timeout
        # One client for every server: httpx pools connections per host inside it.
        # Keep one idle connection per sub-env (and a few for discovery), so batches
        # reuse connections instead of reopening them.
        self._client = pooled_client(
            max_connections, self.num_envs + 4, shards=-(-self.num_envs // _SESSIONS_PER_SHARD)
        )
        servers = [
            AsyncHttpBackend(url, api_key=reveal(api_key), client=self._client, **options)
            for url in urls
        ]
        return _Blocking(servers[0], self._loop), servers

    # -- public attributes ---------------------------------------------------------------

    @property
    def servers(self) -> tuple[str, ...]:
        """Where the sub-envs' sessions live, one entry per server (round-robin)."""
        return tuple(s.location for s in self._servers)

    @property
    def session_ids(self) -> tuple[str | None, ...]:
        """Each sub-env's open session id (None before reset or after a lost session)."""
        return tuple(sub.session_id for sub in self._subs)

    @property
    def sub_env_servers(self) -> tuple[str, ...]:
        """The server of each sub-env."""
        return tuple(sub.server.location for sub in self._subs)

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Sub-envs sent actions whose results ``recv()`` has not returned yet."""
        return tuple(sorted(self._inflight))

    @property
    def template(self) -> OrsEnv:
        """The session-less ``OrsEnv`` used for discovery (tools, splits, tasks)."""
        return self._template

    @property
    def spec(self) -> EnvSpec | None:
        """The spec ``gym.make_vec`` used; ``api_key`` and ``secrets`` kept as ``Secret``."""
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        if value is not None and getattr(value, "kwargs", None):
            from dataclasses import replace

            value = replace(value, kwargs=redact_kwargs(value.kwargs))
        self._spec = value

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
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, int | np.integer):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"reset(seed=[...]) needs {n} seeds (num_envs), got {len(seeds)}")
        ids, per_env = self._reset_targets(options)
        checked: dict[int, dict[str, Any]] = {}
        for i in ids:
            try:
                checked[i] = check_reset_options(per_env[i])
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"reset options of sub-env {i}: {exc}") from None
        for i in ids:
            sub = self._subs[i]
            if seeds[i] is not None or sub.rng is None:
                sub.rng, _ = seeding.np_random(seeds[i])
        for i in ids:
            self._inflight.pop(i, None)
        outcomes = self._loop.run(self._reset_batch(ids, checked))
        return self._observations(), _batch_infos([(o.index, o.info) for o in outcomes], n)

    def step(
        self, actions: Any
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env with its action (an autoresetting one ignores it)."""
        self._check_open()
        if self._inflight:
            raise RuntimeError(
                f"step() while sub-envs {self.in_flight} are in flight after send(); "
                "recv() them first (or reset())"
            )
        self.send(actions)
        outcomes = sorted(self._collect(self.num_envs, self.num_envs), key=lambda o: o.index)
        obs, rewards, terminated, truncated = self._batch(outcomes)
        infos = _batch_infos([(o.index, o.info) for o in outcomes], self.num_envs)
        return obs, rewards, terminated, truncated, infos

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Start stepping sub-envs ``env_ids`` (default: all) with ``actions``, one each.

        Returns at once; ``recv()`` returns the results as they finish. A sub-env
        may not be sent to again before ``recv()`` returned it.
        """
        self._check_open()
        ids = self._env_ids(env_ids)
        busy = sorted(set(ids) & set(self._inflight))
        if busy:
            raise RuntimeError(
                f"sub-envs {busy} are still in flight; recv() their results before sending "
                "them new actions"
            )
        batch = _split_actions(actions, len(ids))
        plans = [self._plan(i, action) for i, action in zip(ids, batch, strict=True)]
        launches = []
        for i, turn in zip(ids, plans, strict=True):
            sub = self._subs[i]
            if turn is not None:
                sub.steps += 1
            future: concurrent.futures.Future[_Outcome] = concurrent.futures.Future()
            self._inflight[i] = future
            launches.append((sub, turn, future))
        self._loop.call_soon(self._launch, launches)

    def recv(
        self, min_envs: int = 1, max_envs: int | None = None
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Results of sub-envs in flight: at least ``min_envs`` (fewer if fewer are in
        flight) and at most ``max_envs`` (default all that have finished).

        The batch is in finishing order; ``info["env_id"]`` names the sub-envs.
        """
        self._check_open()
        if not self._inflight:
            raise RuntimeError("recv() with no sub-env in flight; send() actions first")
        if min_envs < 1:
            raise ValueError(f"min_envs must be >= 1, got {min_envs}")
        cap = self.num_envs if max_envs is None else max_envs
        if cap < min_envs:
            raise ValueError(f"max_envs={max_envs} is below min_envs={min_envs}")
        outcomes = self._collect(min(min_envs, len(self._inflight)), cap)
        obs, rewards, terminated, truncated = self._batch(outcomes)
        infos = _batch_infos(list(enumerate(o.info for o in outcomes)), len(outcomes))
        infos["env_id"] = np.array([o.index for o in outcomes], dtype=np.int64)
        return obs, rewards, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        """Cancel work in flight, delete every session, close connections and the loop."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None and finalizer.detach() is not None:
            self._inflight.clear()
            _release(self._loop, self._servers, self._client, self._template, self._discovery,
                     vector=self)

    # -- planning (caller's thread) ------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed or not self._loop.alive:
            raise RuntimeError("OrsVectorEnv is closed; make a new one")

    def _env_ids(self, env_ids: Sequence[int] | np.ndarray | None) -> list[int]:
        if env_ids is None:
            return list(range(self.num_envs))
        ids = [int(i) for i in np.asarray(env_ids).reshape(-1)]
        bad = [i for i in ids if not 0 <= i < self.num_envs]
        if bad:
            raise ValueError(f"env_ids {bad} out of range: sub-envs are 0..{self.num_envs - 1}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"env_ids {ids} name a sub-env twice")
        return ids

    def _reset_targets(
        self, options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None
    ) -> tuple[list[int], list[Mapping[str, Any] | None]]:
        n = self.num_envs
        if options is None or isinstance(options, Mapping):
            shared = dict(options or {})
            mask = shared.pop("reset_mask", None)
            ids = list(range(n))
            if mask is not None:
                mask = np.asarray(mask)
                if mask.shape != (n,) or mask.dtype != np.bool_:
                    raise ValueError(
                        f"options['reset_mask'] must be a bool array of shape ({n},), "
                        f"got {mask.dtype} {mask.shape}"
                    )
                if not mask.any():
                    raise ValueError("options['reset_mask'] selects no sub-env")
                ids = [int(i) for i in np.flatnonzero(mask)]
            return ids, [shared] * n
        if isinstance(options, str | bytes) or not isinstance(options, Sequence):
            raise TypeError(
                "reset options must be a dict (for every sub-env) or a list of num_envs "
                f"dicts (one each), got {type(options).__name__}"
            )
        per_env = list(options)
        if len(per_env) != n:
            raise ValueError(
                f"reset(options=[...]) needs {n} entries (num_envs), got {len(per_env)}"
            )
        return list(range(n)), per_env

    def _plan(self, i: int, action: Any) -> Turn | None:
        """The sub-env's step as a ``Turn``, or None when it autoresets instead."""
        sub = self._subs[i]
        if sub.ended:
            if self.autoreset_mode is AutoresetMode.NEXT_STEP:
                return None
            raise RuntimeError(
                f"sub-env {i} ended and autoreset_mode is DISABLED; reset it with "
                "reset(options={'reset_mask': mask}) before stepping it"
            )
        if sub.session_id is None or sub.tools is None:
            raise RuntimeError(f"sub-env {i} has no open session; call reset() first")
        try:
            return Turn(parse_action(as_action(action)), self._rules, sub.tools,
                        steps=sub.steps + 1, env_name=self.env_name)
        except OrsError as exc:
            exc.add_note(f"the action of sub-env {i}")
            raise

    # -- running (the loop's thread) -----------------------------------------------------

    def _launch(self, launches: list[tuple[_Sub, Turn | None, concurrent.futures.Future[_Outcome]]]
                ) -> None:
        loop = asyncio.get_running_loop()
        for sub, turn, future in launches:
            task = loop.create_task(self._advance(sub, turn))
            self._tasks[sub.index] = task
            task.add_done_callback(partial(self._landed, sub.index, future))

    def _landed(self, index: int, future: concurrent.futures.Future[_Outcome],
                task: asyncio.Task[_Outcome]) -> None:
        if self._tasks.get(index) is task:
            del self._tasks[index]
        if task.cancelled():
            future.cancel()
        elif task.exception() is not None:
            future.set_exception(task.exception())
        else:
            future.set_result(task.result())
        self._done.put((index, future))

    async def _advance(self, sub: _Sub, turn: Turn | None) -> _Outcome:
        if turn is None:  # NEXT_STEP autoreset: this step opens the next episode
            obs, info, tools = await self._open(sub, {})
            return _Outcome(sub.index, obs, 0.0, False, False, info, tools)
        obs, reward, terminated, truncated, info, failure = await self._run_turn(sub, turn)
        if isinstance(failure, OrsConnectionError):
            await self._check_server(sub, failure)
        if self.autoreset_mode is AutoresetMode.SAME_STEP and (terminated or truncated):
            new_obs, new_info, tools = await self._open(sub, {})
            new_info["final_obs"] = obs
            new_info["final_info"] = info
            return _Outcome(sub.index, new_obs, reward, terminated, truncated, new_info, tools,
                            failure)
        return _Outcome(sub.index, obs, reward, terminated, truncated, info, None, failure)

    async def _run_turn(
        self, sub: _Sub, turn: Turn
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any], OrsError | None]:
        """OrsEnv.step's loop, awaited: the turn's calls in order, a failure ending it."""
        sid, server, env = sub.session_id, sub.server, self.env_name
        assert sid is not None
        failure: OrsError | None = None
        try:
            while (call := turn.next_call()) is not None:
                start = time.perf_counter()
                try:
                    result = await server.call(env, sid, call.name, call.arguments)
                except OrsError as exc:
                    raise exc.with_context(tool=call.name) from exc.__cause__
                turn.record(call, result, time.perf_counter() - start)
        except RECOVERABLE as exc:
            exc.with_context(server=server.location, env_name=env, session_id=sid)
            if self.on_error == "raise":
                exc.add_note(f"in sub-env {sub.index} of {self!r}")
                raise
            failure = exc
            if turn.fail(exc):
                sub.session_id = None  # nothing left to delete
        obs, reward, terminated, truncated, info = turn.finish()
        return obs, reward, terminated, truncated, info, failure

    async def _open(
        self, sub: _Sub, options: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], ListToolsOutput]:
        """OrsEnv.reset, awaited: end the old session, open one for a task, read its prompt."""
        old, sub.session_id, sub.tools, sub.steps = sub.session_id, None, None, 0
        if old is not None:
            self._delete_later(sub.server, old)
        server, env = sub.server, self.env_name
        loop = asyncio.get_running_loop()
        rng = sub.rng
        assert rng is not None  # seeded by reset() before any session opens
        try:
            # Task choice may ask the server (the template's blocking API): off the loop.
            task_spec, split, index = await loop.run_in_executor(
                self._discovery, choose_task, self._template, options, rng
            )
            sid = await server.create_session(
                env, task_spec=task_spec if split is None else None, split=split, index=index,
                secrets=self._secrets,
            )
            sub.session_id = sid
            prompt, tools = await asyncio.gather(
                server.prompt(env, sid), server.task_tools(env, sid)
            )
        except OrsError as exc:
            exc.with_context(server=server.location, env_name=env, session_id=sub.session_id)
            exc.add_note(f"while resetting sub-env {sub.index} of {self!r}")
            raise
        sub.tools = tools
        obs, info = reset_result(
            prompt, tools, env_name=env, task_spec=task_spec, split=split, index=index,
            session_id=sid, image_size=self._rules.image_size,
            max_image_pixels=self._rules.max_image_pixels,
        )
        return obs, info, tools

    async def _reset_batch(self, ids: list[int], options: dict[int, dict[str, Any]]
                           ) -> list[_Outcome]:
        await self._cancel([self._tasks[i] for i in ids if i in self._tasks])

        async def one(i: int) -> _Outcome:
            obs, info, tools = await self._open(self._subs[i], options[i])
            return _Outcome(i, obs, 0.0, False, False, info, tools)

        results = await asyncio.gather(*(one(i) for i in ids), return_exceptions=True)
        outcomes = [r for r in results if isinstance(r, _Outcome)]
        self._absorb(outcomes)
        _raise_first([r for r in results if isinstance(r, BaseException)])
        return outcomes

    async def _check_server(self, sub: _Sub, failure: OrsError) -> None:
        """After a connection failure: raise if the sub-env's whole server is down."""
        server = sub.server
        try:
            await server.probe()
        except OrsError as exc:
            hosted = [s.index for s in self._subs if s.server is server]
            raise OrsConnectionError(
                f"the ORS server at {server.location} stopped answering ({exc.message}); "
                f"the sub-envs it hosts ({', '.join(map(str, hosted))}) cannot go on. Start "
                "it again and call reset(), or leave it out of base_url. First failure, in "
                f"sub-env {sub.index}: {failure.message}",
                server=server.location, env_name=self.env_name,
            ) from failure

    def _delete_later(self, server: Any, session_id: str) -> None:
        async def delete() -> None:
            try:
                await server.delete_session(session_id)
            except Exception as exc:  # best effort: the session may be gone with its server
                logger.debug("could not delete session %s: %s", session_id, exc)

        task = asyncio.get_running_loop().create_task(delete())
        self._pending_deletes.add(task)
        task.add_done_callback(self._pending_deletes.discard)

    async def _cancel(self, tasks: Sequence[asyncio.Task[Any]]) -> None:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _shutdown(self) -> None:
        """Cancel what runs, then delete every session (all servers at once)."""
        await self._cancel(list(self._tasks.values()))
        if self._pending_deletes:
            await asyncio.wait(list(self._pending_deletes))

    # -- results (caller's thread) -------------------------------------------------------

    def _collect(self, at_least: int, at_most: int) -> list[_Outcome]:
        """Wait for ``at_least`` in-flight results, take up to ``at_most``; raise the first
        failure among them (a whole-server failure before any other)."""
        futures: list[concurrent.futures.Future[_Outcome]] = []
        while len(futures) < at_least:
            for index, future in self._done.take(at_least - len(futures),
                                                 at_most - len(futures)):
                pending = self._inflight.get(index)
                if pending is not None and pending is future:  # else cancelled by a reset
                    del self._inflight[index]
                    futures.append(pending)
        errors = [e for f in futures if (e := f.exception()) is not None]
        outcomes = [f.result() for f in futures if f.exception() is None]
        self._absorb(outcomes)
        _raise_first(errors)
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

    def _absorb(self, outcomes: Sequence[_Outcome]) -> None:
        """Record each sub-env's new observation, end flag and (after a reset) tools."""
        spaces = self.action_space.spaces  # type: ignore[attr-defined]
        for o in outcomes:
            sub = self._subs[o.index]
            sub.obs = o.obs
            sub.ended = (o.terminated or o.truncated) and (
                self.autoreset_mode is not AutoresetMode.SAME_STEP
            )
            if o.tools is not None:
                spaces[o.index].set_tools(o.tools.tools, o.tools.terminal_tool)

    def _observations(self, outcomes: Sequence[_Outcome] | None = None) -> dict[str, Any]:
        items = [sub.obs for sub in self._subs] if outcomes is None else [o.obs for o in outcomes]
        space = self.single_observation_space
        out: Any = create_empty_array(space, n=len(items), fn=np.zeros)
        return cast(dict[str, Any], concatenate(space, items, out))

    def _batch(
        self, outcomes: Sequence[_Outcome]
    ) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
        return (
            self._observations(outcomes),
            np.array([o.reward for o in outcomes], dtype=np.float64),
            np.array([o.terminated for o in outcomes], dtype=np.bool_),
            np.array([o.truncated for o in outcomes], dtype=np.bool_),
        )


def _raise_first(errors: Sequence[BaseException]) -> None:
    """Raise the most telling of ``errors``, if any: a dead server before anything else."""
    if errors:
        raise sorted(errors, key=lambda e: not isinstance(e, OrsConnectionError))[0]


def _split_actions(actions: Any, n: int) -> list[Any]:
    """``actions`` as a list of ``n`` per-sub-env actions, or a clear error."""
    if isinstance(actions, str | bytes | Mapping) or not isinstance(
        actions, Sequence | np.ndarray
    ):
        raise TypeError(
            f"actions must be a sequence of {n} actions, one per sub-env (e.g. a tuple of "
            f"str or dicts), got {type(actions).__name__}"
        )
    batch = list(actions)
    if len(batch) != n:
        raise ValueError(f"expected {n} actions (one per sub-env), got {len(batch)}")
    return batch


def _autoreset_mode(mode: AutoresetMode | str) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    for candidate in AutoresetMode:
        if mode in (candidate.value, candidate.name, candidate.name.lower()):
            return candidate
    raise ValueError(
        f"autoreset_mode={mode!r}; choose one of gymnasium's AutoresetMode: "
        + ", ".join(f"{m.value!r}" for m in AutoresetMode)
    )


def _server_urls(base_url: str | Sequence[str] | None) -> list[str] | None:
    if base_url is None:
        return None
    urls = [base_url] if isinstance(base_url, str) else list(base_url)
    if not urls or not all(isinstance(u, str) for u in urls):
        raise ValueError(
            "base_url must be a server URL or a non-empty list of them, e.g. "
            f"['http://127.0.0.1:8080', 'http://127.0.0.1:8081']; got {base_url!r}"
        )
    return urls


def _class_name(env_class: Any) -> str:
    """The environment name an SDK class (or ``"module:Class"``) is served under."""
    if isinstance(env_class, str):
        return env_class.rpartition(":")[2].lower()
    name = getattr(env_class, "name", None)
    return str(name() if callable(name) else env_class.__name__).lower()


def _release(
    loop: _LoopThread,
    servers: Sequence[Any],
    client: Any,
    template: OrsEnv | None,
    discovery: concurrent.futures.ThreadPoolExecutor,
    vector: OrsVectorEnv | None = None,
) -> None:
    """Delete every session, close backends and the shared client, stop the loop."""
    if loop.alive:

        async def close_all() -> None:
            if vector is not None:
                await vector._shutdown()
            results = await asyncio.gather(*(s.aclose() for s in servers),
                                           return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    logger.debug("closing an OrsVectorEnv backend failed: %s", result)
            if client is not None:
                await client.aclose()

        try:
            loop.run(close_all())
        except Exception as exc:
            logger.debug("closing OrsVectorEnv failed: %s", exc)
    if template is not None:
        template.close()
    loop.stop()
    discovery.shutdown(wait=False)
