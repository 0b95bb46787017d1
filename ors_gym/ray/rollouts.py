"""Distributed rollouts of language-model agents: tasks in, trajectories out, over Ray actors.

::

    import ray
    from ors_gym.ray import rollouts

    def policy(messages, tools):          # or async def; e.g. an OpenAI-compatible call
        return client.chat.completions.create(
            model=MODEL, messages=messages, tools=tools).choices[0].message

    ray.init()
    with rollouts(policy, tasks=[{"split": "train", "index": i} for i in range(1000)],
                  env_name="math", servers=["http://a:8080", "http://b:8080"],
                  num_actors=4, max_sessions_per_actor=32, max_sessions_per_server=64) as run:
        for trajectory in run:            # streamed as episodes finish
            ...                           # the record RecordTrajectories writes

**Building blocks, and why.** Each actor is an async Ray actor whose
``max_concurrency`` is the sessions it may run at once; each episode is one
call of an async *streaming generator* method
(:meth:`~ors_gym.ray._actor.RolloutWorker.episode`), so an actor runs many
sessions concurrently on one event loop (:class:`~ors_gym.AsyncOrsEnv` over
one shared backend per server), and the driver waits on all of them with
``ray.wait`` and gets each item as it is produced. That streaming is what
fault handling needs: the session id reaches the driver as soon as the
session exists, and a dead actor's episodes fail one by one with
``ActorDiedError``, so the driver knows exactly which episodes were lost and
which sessions to delete. ``ray.util.ActorPool`` keeps one call in flight per
actor and has no notion of a dead actor; Ray Data's ``map_batches`` with
actor concurrency yields whole batches, retries or fails whole blocks and hides
which actor ran what; neither reports an episode lost with its actor.

**Limits.** The driver schedules: an episode goes to the live actor with
the fewest sessions (below ``max_sessions_per_actor``) and to the server with
the fewest sessions (below ``max_sessions_per_server``, counted over all
actors), so sessions spread evenly over ``servers``.

**Faults.** An actor that dies loses only its in-flight episodes. Each is
reported as a record with ``"complete": false`` and ``"ended_by":
"actor_died"`` (or put back in the queue, ``retries`` times, when asked);
none is dropped silently, and the run goes on with the other actors. The
driver deletes each lost episode's session itself (the actor reported the id
right after opening it). A session whose id had not yet reached the driver
when its actor died (it was being opened at that instant) is reaped by the
server's ping timeout (the ``openreward`` SDK server's: 15 minutes without a
request; the dead actor no longer pings). Leaving the iteration early,
``close()``, an exception or Ctrl-C (``KeyboardInterrupt``) cancels the
episodes in flight (an ``AsyncOrsEnv`` deletes its session when cancelled),
deletes every session the driver knows of, and kills the actors; so does the
end of the driver's interpreter (an ``atexit`` hook that runs before Ray's own
shutdown). ``ray.shutdown()`` ends the actors without any cleanup of theirs
(async actors run no ``atexit`` hooks): the driver deletes their sessions
from this process, at the iterator's next use (which then raises
``RuntimeError``), at ``close()`` or at exit.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ors_gym.ray._actor import INPUTS, RolloutWorker
from ors_gym.ray._jobs import Job, cause, failed_record, rollout_info
from ors_gym.ray._options import actor_env_kwargs, check_task_indices, task_options
from ors_gym.ray._require import require
from ors_gym.ray._teardown import SessionDeleter, track, untrack

__all__ = ["Progress", "Rollouts", "rollouts"]

logger = logging.getLogger("ors_gym")

Policy = Callable[[Any, list[dict[str, Any]]], Any]

#: How long ``close()`` waits for cancelled episodes to delete their sessions, and for the
#: actors to close their backends.
CANCEL_WAIT_S = 10.0
#: The longest one ``ray.wait`` blocks, so Ctrl-C is seen between two waits.
WAIT_S = 1.0


@dataclass
class Progress:
    """Where a run stands; :class:`Rollouts` updates it after every event.

    ``finished``: trajectories returned (complete or truncated episodes);
    ``failed``: episodes reported as failed (their actor died, or they raised);
    ``retried``: lost episodes put back in the queue; ``running``: in flight;
    ``sessions``: open sessions the driver knows of, per server.
    """

    total: int
    finished: int = 0
    failed: int = 0
    retried: int = 0
    running: int = 0
    live_actors: int = 0
    sessions: dict[str, int] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        """Episodes accounted for: ``finished + failed``."""
        return self.finished + self.failed

    def __str__(self) -> str:
        seconds = time.monotonic() - self.started_at
        return (
            f"{self.done}/{self.total} episodes ({self.finished} finished, {self.failed} failed, "
            f"{self.running} running, {self.retried} retried) on {self.live_actors} actors "
            f"in {seconds:.1f} s"
        )


class Rollouts(Iterator[dict[str, Any]]):
    """Episodes of ``policy`` on ``tasks`` over a pool of Ray actors; iterate for records.

    Made by :func:`rollouts` (see there for the arguments). Yields one record
    per task, as episodes finish: the trajectory ``RecordTrajectories``
    writes, plus ``"rollout": {"task_index", "attempt", "actor", "server",
    "session_id"}``, ``"task"`` (its reset options) and ``"error": None``; an
    episode that failed yields a record of the same fields with ``"complete": false``,
    ``"ended_by": "actor_died" | "error"``, ``"error"`` and no steps (logged at
    WARNING and counted in ``progress.failed``). Task indices outside their split
    are refused with a ``ValueError`` before any actor starts. ``progress`` tells
    where the run stands. Use as a context manager, or call :meth:`close`, to end it
    early.
    """

    def __init__(
        self,
        policy: Policy,
        tasks: Iterable[Mapping[str, Any] | int],
        *,
        env: Mapping[str, Any],
        servers: Sequence[str] | None,
        env_id: str | None,
        num_actors: int,
        max_sessions_per_actor: int,
        max_sessions_per_server: int | None,
        retries: int,
        inputs: str,
        seed: int | None,
        on_progress: Callable[[Progress], None] | None,
        actor_options: Mapping[str, Any] | None,
    ) -> None:
        ray = require("ray")
        if num_actors < 1 or max_sessions_per_actor < 1:
            raise ValueError("num_actors and max_sessions_per_actor must be at least 1")
        if max_sessions_per_server is not None and max_sessions_per_server < 1:
            raise ValueError("max_sessions_per_server must be at least 1 (or None: no bound)")
        if inputs not in INPUTS:
            raise ValueError(f"inputs={inputs!r}; choose one of {list(INPUTS)}")
        self._ray = ray
        self._env = dict(env)
        self._servers: list[str | None] = list(servers) if servers else [None]
        self._env_id = env_id
        self._per_actor = max_sessions_per_actor
        self._per_server = max_sessions_per_server
        self._retries = retries
        self._on_progress = on_progress
        self._queue: deque[Job] = deque(
            Job(i, task_options(t), None if seed is None else seed + i)
            for i, t in enumerate(tasks)
        )
        self.progress = Progress(total=len(self._queue))
        check_task_indices(self._queue, self._env, self._servers[0])
        self._inflight: dict[Any, Job] = {}
        self._ready: deque[dict[str, Any]] = deque()
        self._load: dict[int, int] = {}
        self._server_load: dict[str | None, int] = {s: 0 for s in self._servers}
        self._deleter = SessionDeleter(self._env.get("api_key"))
        self._closed = False
        options = {"max_concurrency": max_sessions_per_actor, **dict(actor_options or {})}
        remote = ray.remote(RolloutWorker).options(**options)
        self.actors: list[Any] = [
            remote.remote(
                policy, self._env, inputs=inputs, env_id=env_id, threads=max_sessions_per_actor
            )
            for _ in range(num_actors)
        ]
        self._load = dict.fromkeys(range(num_actors), 0)
        self.progress.live_actors = num_actors
        track(self)

    # -- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> Rollouts:
        return self

    def __next__(self) -> dict[str, Any]:
        try:
            while not self._ready:
                if self._closed or not (self._queue or self._inflight):
                    self.close()
                    raise StopIteration
                self._dispatch()
                if self._inflight:
                    self._wait_once()
            return self._ready.popleft()
        except StopIteration:
            raise
        except BaseException:  # Ctrl-C, a Ray error: end the run, delete its sessions
            self.close()
            raise

    def __enter__(self) -> Rollouts:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- scheduling ------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Start queued episodes while an actor and a server have room."""
        while self._queue:
            actor = min(self._load, key=self._load.__getitem__, default=None)
            server = min(self._server_load, key=self._server_load.__getitem__)
            if actor is None:  # every actor died: what is left cannot run
                job = self._queue.popleft()
                self._fail(job, "actor_died", "no live actor is left to run this episode")
                continue
            if self._load[actor] >= self._per_actor:
                return
            if self._per_server is not None and self._server_load[server] >= self._per_server:
                return
            job = self._queue.popleft()
            job.actor, job.server, job.session, job.ended = actor, server, None, False
            job.attempt += 1
            payload = {"task": job.task, "server": server, "seed": job.seed}
            generator = self.actors[actor].episode.remote(payload)
            self._inflight[generator] = job
            self._load[actor] += 1
            self._server_load[server] += 1
            self.progress.running += 1

    def _check_ray(self) -> None:
        """Raise if Ray was shut down (a Ray call on a stream would then abort the process)."""
        if not self._ray.is_initialized():
            raise RuntimeError(
                "Ray was shut down during the rollout; its open sessions were deleted"
            )

    def _wait_once(self) -> None:
        ray = self._ray
        self._check_ray()
        ready, _ = ray.wait(list(self._inflight), num_returns=1, timeout=WAIT_S)
        for generator in ready:
            job = self._inflight[generator]
            self._check_ray()  # a progress callback may have shut Ray down
            try:
                item = ray.get(next(generator))
            except StopIteration:
                self._finish(generator)
                continue
            except ray.exceptions.RayActorError as exc:
                self._lost(generator, job, exc)
                continue
            except ray.exceptions.RayTaskError as exc:
                self._finish(generator)
                self._fail(job, "error", cause(exc))
                continue
            if "opened" in item:
                job.session = item["opened"]
                self._count_session(job.server, +1)
                self._report()
            elif "record" in item:
                record = item["record"]
                record["rollout"] = rollout_info(job)
                record.update(task=job.task, error=None)  # the fields a failed record has
                if job.session is not None:
                    self._count_session(job.server, -1)
                    job.session = None
                self.progress.finished += 1
                self.progress.running -= 1
                job.ended = True
                self._ready.append(record)
                self._report()

    def _finish(self, generator: Any) -> None:
        """The episode's call ended: free its actor's and server's slots."""
        job = self._inflight.pop(generator)
        if job.actor in self._load:
            self._load[job.actor] -= 1
        self._server_load[job.server] -= 1
        if not job.ended:
            self.progress.running -= 1
        if job.session is not None:  # it raised, or its actor died, with its session open
            self._count_session(job.server, -1)
            job.session = None

    def _lost(self, generator: Any, job: Job, exc: BaseException) -> None:
        """``job``'s actor died mid-episode: delete its session, then retry or report it."""
        if self._load.pop(job.actor, None) is not None:
            logger.warning("rollout actor %d died: %s", job.actor, cause(exc))
            self.progress.live_actors = len(self._load)
        session = job.session
        self._finish(generator)
        if session is not None and job.server is not None:
            self._deleter.delete(job.server, session)
        if job.attempt <= self._retries:
            self.progress.retried += 1
            self._queue.appendleft(job)
            self._report()
        else:
            self._fail(job, "actor_died", f"the actor running it died: {cause(exc)}",
                       session=session)

    def _fail(self, job: Job, ended_by: str, error: str, *, session: str | None = None) -> None:
        record = failed_record(
            job, env_id=self._env_id, env_name=self._env.get("env_name"), ended_by=ended_by,
            error=error, session=session,
        )
        logger.warning("rollout task %d (%s) failed after %d attempt(s): %s", job.index,
                       job.task, job.attempt, error)
        self.progress.failed += 1
        self._ready.append(record)
        self._report()

    def _count_session(self, server: str | None, delta: int) -> None:
        key = server or "in-process"
        sessions = self.progress.sessions
        sessions[key] = sessions.get(key, 0) + delta

    def _report(self) -> None:
        if self._on_progress is not None:
            self._on_progress(self.progress)

    # -- cleanup ---------------------------------------------------------------------------
    def in_flight(self) -> list[dict[str, Any]]:
        """The episodes in flight: ``task_index``, ``attempt``, ``actor``, ``server``,
        ``session_id`` (None until the session is open)."""
        return [rollout_info(job) for job in self._inflight.values()]

    def open_sessions(self) -> list[tuple[str, str]]:
        """``(server, session_id)`` of every in-flight episode's session the driver knows."""
        return [
            (job.server, job.session)
            for job in self._inflight.values()
            if job.server is not None and job.session is not None
        ]

    def close(self) -> None:
        """End the run: cancel episodes in flight, delete their sessions, kill the actors.

        Safe to call twice, and after ``ray.shutdown()`` (then only the
        sessions are deleted, from this process).
        """
        if self._closed:
            return
        self._closed = True
        untrack(self)
        known = self.open_sessions()
        ray = self._ray
        try:
            if ray.is_initialized():
                self._cancel_inflight()
                self._close_actors()
        finally:
            for server, session in known:
                self._deleter.delete(server, session)
            self._deleter.close()
            self._inflight.clear()
            self.progress.running = 0
            self.progress.sessions.clear()

    def _close_actors(self) -> None:
        """Let the live actors close their backends (bounded), then kill every actor."""
        ray = self._ray
        closing = [self.actors[i].close.remote() for i in self._load]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=CANCEL_WAIT_S)
        finally:
            for actor in self.actors:
                ray.kill(actor)

    def _cancel_inflight(self) -> None:
        """Cancel the episodes in flight and wait (bounded) until they have ended."""
        ray = self._ray
        pending = list(self._inflight)
        for generator in pending:
            ray.cancel(generator)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while pending and time.monotonic() < deadline:
            ready, _ = ray.wait(pending, num_returns=1, timeout=deadline - time.monotonic())
            for generator in ready:
                try:
                    next(generator)
                except StopIteration:
                    pending.remove(generator)
                except Exception:  # cancelled, or the actor died: the episode has ended
                    pending.remove(generator)


def rollouts(
    policy: Policy,
    tasks: Iterable[Mapping[str, Any] | int],
    *,
    servers: Sequence[str] | None = None,
    env_id: str | None = None,
    env_name: str | None = None,
    env_class: Any = None,
    num_actors: int = 2,
    max_sessions_per_actor: int = 16,
    max_sessions_per_server: int | None = None,
    retries: int = 0,
    inputs: str = "conversation",
    seed: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    actor_options: Mapping[str, Any] | None = None,
    **env_options: Any,
) -> Rollouts:
    """Run ``policy`` on every task over ``num_actors`` Ray actors; iterate for trajectories.

    ``policy(observation, tools) -> action``, sync or ``async``:
    ``observation`` is the conversation so far as OpenAI chat messages
    (``inputs="conversation"``) or the env's ``{"text", "images"}``
    (``inputs="observation"``); ``tools`` the session's tools in OpenAI's
    function format; the action is anything ``OrsEnv.step`` takes, a model
    client's reply included. A blocking policy runs in a thread of its actor.

    ``tasks``: reset options (``{"split", "index"}`` or ``{"task_spec"}``), or
    ints (task indices of the default split). The environment: ``env_id`` (a
    registered ``ors/...`` id, whose ``env_class``, ``env_name`` and step limit
    are used) or ``env_name`` / ``env_class``; ``servers``: ORS server URLs to
    spread sessions over (None: in-process, ``env_class``). Other keywords
    are ``AsyncOrsEnv`` options (``max_steps``, ``api_key``, ``on_error``...).
    ``max_sessions_per_actor``: sessions one actor runs at once;
    ``max_sessions_per_server``: sessions open on one server at once, over all
    actors (None: no bound). ``retries``: how often an episode lost with its
    actor is run again (0: it is reported). ``seed``: episode ``i`` resets with
    ``seed + i``. ``on_progress(progress)`` is called after each event.
    ``actor_options``: ``ray.remote`` options of the actors (``num_cpus``...).
    Needs ``ray.init()`` first (or starts Ray on this machine).
    """
    env = actor_env_kwargs(env_id, env_name, env_class, servers, env_options)
    return Rollouts(
        policy, tasks, env=env, servers=servers, env_id=env_id, num_actors=num_actors,
        max_sessions_per_actor=max_sessions_per_actor,
        max_sessions_per_server=max_sessions_per_server, retries=retries, inputs=inputs,
        seed=seed, on_progress=on_progress, actor_options=actor_options,
    )

