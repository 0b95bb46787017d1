"""``RolloutUploader``: finished episodes sent to the platform's rollout log in the background.

``submit(record)`` returns at once: the record goes to an upload task on a
``Runtime`` of the uploader's own (its loop driven by the runtime's background
driver, as the SDK's ``RolloutAPI`` runs its send loop in a thread), which turns it
into the SDK's events (``_events``), gathers them into batches (up to
``max_batch_events`` events or ``max_batch_bytes``, or whatever is waiting once
the oldest event is ``max_age`` seconds old) and posts each batch to
``/v1/rollouts`` in order, with the HTTP backend's retries. A step never waits
on the network. ``flush()`` waits until everything submitted so far was sent;
``close()`` (also run at interpreter exit) sends what is left, driving the loop
in the closing thread, and says at WARNING how many rollouts could not be sent,
if any. No upload trouble reaches the caller: a record that cannot be read (even
one that raises ``SystemExit``), a failed post or an ended task is counted
(``failed``, ``dropped``) and said at WARNING. The runtime is the uploader's
own, so nothing of the upload ever holds the loop other blocking calls run on.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_gym._json import default
from ors_gym._runtime import Runtime
from ors_gym.errors import OrsError
from ors_gym.platform._events import RolloutHeader, log_entries, rollout_events

__all__ = ["RolloutUploader"]

logger = logging.getLogger("ors_gym")


@dataclass
class _Episode:
    record: Mapping[str, Any]
    rollout_id: str
    environment: str | None
    variant: str | None
    rollout_name: str | None
    metadata: Mapping[str, Any] | None


@dataclass
class _Flush:
    done: threading.Event = field(default_factory=threading.Event)


_STOP = object()


class _InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs each call at once, in the caller's thread.

    The upload loop's default executor: asyncio resolves a host name
    (``getaddrinfo``) in it, and at interpreter exit, when ``close()`` may open
    the first connection, a thread pool refuses new work. The loop is the
    uploader's own, driven by its runtime's driver thread or by ``close()``, so a
    blocking call there holds back no step.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the awaiting coroutine, as a pool would
            future.set_exception(exc)
        return future


class RolloutUploader:
    """Upload finished episodes as rollouts of run ``run_name``, batched in the background.

    ``api_key``/``base_url``: the platform API's (default ``OPENREWARD_API_KEY`` and
    the SDK's API host); ``run_info``: the run's constant facts (``model_name``,
    ``run_type``...: the SDK's ``RunInfo`` fields) sent with every rollout.
    ``shutdown_timeout``: how long ``close()`` waits for the last batches. Other
    keywords are ``HttpOptions`` of the uploads (``max_retries``, ``timeout``...).
    """

    def __init__(
        self, run_name: str, *, api_key: str | None = None, base_url: str | None = None,
        run_info: Mapping[str, Any] | None = None, max_batch_events: int = 128,
        max_batch_bytes: int = 1_000_000, max_age: float = 1.0,
        shutdown_timeout: float = 30.0, **options: Any,
    ) -> None:
        if not isinstance(run_name, str) or not run_name:
            raise ValueError(f"run_name must be a non-empty str, got {run_name!r}")
        if max_batch_events < 1 or max_batch_bytes < 1 or max_age < 0:
            raise ValueError("max_batch_events and max_batch_bytes must be positive and "
                             "max_age not negative")
        from ors_gym.platform._client import AsyncPlatformClient

        self.run_name = run_name
        self.run_info = dict(run_info) if run_info else None
        self.max_batch_events = max_batch_events
        self.max_batch_bytes = max_batch_bytes
        self.max_age = max_age
        self.shutdown_timeout = shutdown_timeout
        # Made here so a bad URL or option fails now, not in the upload task.
        self._client = AsyncPlatformClient(api_key=api_key, base_url=base_url, **options)
        self.location = self._client.location
        self.sent = 0  # events the platform accepted
        self.failed = 0  # events given up on
        self.dropped = 0  # rollouts that never reached the upload task (it had ended)
        self._unsent = 0  # rollouts submitted and neither sent nor given up on yet
        self._ids: dict[tuple[str, str | None], tuple[str | None, str | None]] = {}
        self._lock = threading.Lock()
        self._runtime = Runtime("ors-rollout-upload")  # its own: no other call waits on it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._task: asyncio.Task[None] | None = None  # the upload task, once started
        self._done = threading.Event()  # set when the upload task has ended
        self._closed = False
        self._ended = False  # the upload task has ended: items put now are lost
        atexit.register(self.close)

    def __repr__(self) -> str:
        return f"RolloutUploader({self.run_name!r}, {self.location!r})"

    # -- the caller's side: never waits on the network -------------------------------------
    def submit(
        self, record: Mapping[str, Any], *, environment: str | None = None,
        variant: str | None = None, rollout_name: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Queue a finished episode's record; returns its rollout id at once.

        ``environment``: the hosted deployment (``"Owner/name"``) it ran on, if any.
        """
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; make a new one to upload more")
        rollout_id = str(uuid.uuid4())
        with self._lock:
            self._unsent += 1
        self._put(_Episode(record, rollout_id, environment, variant, rollout_name, metadata))
        return rollout_id

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far was sent (or given up); False if
        ``timeout`` passed first."""
        if self._task is None:
            return True
        flush = _Flush()
        self._put(flush)
        return flush.done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Send what is left and end the upload task (at most ``timeout``, default
        ``shutdown_timeout``, seconds); idempotent, and run at interpreter exit."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        task = self._task
        if task is None:
            return
        self._put(_STOP)
        wait = self.shutdown_timeout if timeout is None else timeout
        try:
            # Driven here: at interpreter exit no other thread may be left to drive it.
            finished = self._runtime.run(_ended(task, wait))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # upload trouble is never raised into the caller
            logger.warning("rollout upload to %s: closing failed (%s: %s)", self.location,
                           type(exc).__name__, exc)
            finished = False
        if finished:
            self._runtime.close()
        else:  # the background driver goes on sending the last batches
            self._runtime.drive_in_background()
        unsent = self._unsent + self.dropped
        if not finished:
            logger.warning("rollout upload to %s: gave up waiting for the last batches after "
                           "%s s: %d rollouts of run %r not sent (%d events sent, %d given up "
                           "on)", self.location, wait, unsent, self.run_name, self.sent,
                           self.failed)
        elif unsent:
            logger.warning("rollout upload to %s: %d rollouts of run %r not sent (%d events "
                           "sent, %d given up on)", self.location, unsent, self.run_name,
                           self.sent, self.failed)

    def __enter__(self) -> RolloutUploader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, item: Any) -> None:
        with self._lock:
            if self._task is None:
                self._runtime.run(self._start())
                self._runtime.drive_in_background()
            loop = self._loop
            assert loop is not None
            if not self._ended:
                try:
                    loop.call_soon_threadsafe(self._deliver, item)
                    return
                except RuntimeError:  # the loop was closed
                    pass
        self._lost(item)  # never raised into a step: said and counted instead

    def _deliver(self, item: Any) -> None:
        # On the loop: an item that arrives after the upload task ended is lost.
        if self._ended:
            self._lost(item)
        else:
            assert self._queue is not None
            self._queue.put_nowait(item)

    def _lost(self, item: Any) -> None:
        """``item`` can no longer reach the upload task: a WARNING, and it is counted."""
        if isinstance(item, _Flush):
            item.done.set()
        elif isinstance(item, _Episode):
            with self._lock:
                self._unsent -= 1
                self.dropped += 1
                dropped = self.dropped
            logger.warning("rollout upload to %s: the upload task has ended; a rollout of "
                           "run %r is not sent (%d so far)", self.location, self.run_name,
                           dropped)

    # -- the upload task's side (on the runtime's loop) ---------------------------------------
    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(_InlineExecutor())
        self._loop, self._queue = loop, asyncio.Queue()
        self._task = loop.create_task(self._work(self._queue))  # the runtime drives it
        self._task.add_done_callback(self._on_end)

    def _on_end(self, task: asyncio.Task[None]) -> None:
        with self._lock:
            self._ended = True  # from now on ``_put`` counts items as lost
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            logger.warning("rollout upload to %s: the upload task failed (%s: %s)",
                           self.location, type(exc).__name__, exc)
        assert self._queue is not None
        while not self._queue.empty():
            self._lost(self._queue.get_nowait())
        self._done.set()

    async def _work(self, queue: asyncio.Queue[Any]) -> None:
        batch: list[bytes] = []
        size = 0
        ends = 0  # rollouts whose last event is in ``batch``
        oldest: float | None = None
        try:
            while True:
                wait = None if oldest is None else max(oldest + self.max_age - time.monotonic(), 0)
                try:
                    item = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    item = None  # the oldest event is due
                if isinstance(item, _Episode):
                    events = await self._encoded(item)
                    if not events:
                        self._settle(1)
                    for raw in events:
                        if batch and (len(batch) >= self.max_batch_events
                                      or size + len(raw) > self.max_batch_bytes):
                            await self._send(batch)
                            self._settle(ends)
                            batch, size, ends = [], 0, 0
                        batch.append(raw)
                        size += len(raw)
                        oldest = oldest or time.monotonic()
                    ends += bool(events)
                    if len(batch) < self.max_batch_events and size < self.max_batch_bytes:
                        continue
                if batch:
                    await self._send(batch)
                    self._settle(ends)
                    batch, size, ends, oldest = [], 0, 0, None
                if isinstance(item, _Flush):
                    item.done.set()
                elif item is _STOP:
                    return
        finally:
            await self._client.aclose()

    def _settle(self, rollouts: int) -> None:
        """``rollouts`` were sent or given up on."""
        with self._lock:
            self._unsent -= rollouts

    async def _encoded(self, episode: _Episode) -> list[bytes]:
        """The episode's events as JSON; none (and a WARNING) for a record that cannot be
        read as a rollout or holds a value JSON cannot carry (numpy values are numbers)."""
        try:
            events = await self._events(episode)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:  # any bad record, even SystemExit: the task serves
            # the next one (ending it would lose every later rollout)
            logger.warning("rollout upload: a record of run %r cannot be read as a rollout "
                           "(%s: %s); it is not uploaded", self.run_name, type(exc).__name__, exc)
            return []
        try:
            return [json.dumps(event, ensure_ascii=False, default=default).encode()
                    for event in events]
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:  # a value's own hook may raise anything
            self.failed += len(events)
            logger.warning("rollout upload: %d events of a rollout of run %r not sent: they "
                           "hold a value JSON cannot carry (%s: %s)", len(events),
                           self.run_name, type(exc).__name__, exc)
            return []

    async def _events(self, episode: _Episode) -> list[dict[str, Any]]:
        record = episode.record
        env_id = variant_id = None
        if episode.environment:
            env_id, variant_id = await self._lookup(episode.environment, episode.variant)
        index = record.get("index")
        seconds = record.get("seconds")
        if seconds is None and record.get("started_at") and record.get("ended_at"):
            seconds = float(record["ended_at"]) - float(record["started_at"])
        info = None if index is None else {
            "task_index": int(index),
            "duration_ms": None if seconds is None else int(float(seconds) * 1000),
        }
        header = RolloutHeader(
            run_name=self.run_name, rollout_name=episode.rollout_name,
            environment=episode.environment, environment_id=env_id,
            variant=episode.variant, variant_id=variant_id, split=record.get("split"),
            metadata=episode.metadata, task_spec=record.get("task_spec"),
            run_info=self.run_info,
        )
        return rollout_events(header, log_entries(record), rollout_id=episode.rollout_id,
                              rollout_info=info)

    async def _lookup(
        self, environment: str, variant: str | None
    ) -> tuple[str | None, str | None]:
        """The platform's ids of the environment and variant (asked once each, as the SDK
        asks them per rollout); None where the platform does not say."""
        key = (environment, variant)
        if key not in self._ids:
            try:
                self._ids[key] = await self._client.environment_ids(environment, variant)
            except Exception as exc:  # the ids are optional: the rollout goes without them
                logger.debug("no platform id for %s: %s", environment, exc)
                self._ids[key] = (None, None)
        return self._ids[key]

    async def _send(self, batch: list[bytes]) -> None:
        events = [json.loads(raw) for raw in batch]
        try:
            await self._client.post_rollouts(events)
        except Exception as exc:  # the task lives on to send the next batches
            self.failed += len(events)
            said = exc.message if isinstance(exc, OrsError) else f"{type(exc).__name__}: {exc}"
            logger.warning("rollout upload to %s: %d events of run %r not sent: %s",
                           self.location, len(events), self.run_name, said)
        else:
            self.sent += len(events)


async def _ended(task: asyncio.Task[None], timeout: float) -> bool:
    """Whether ``task`` ended within ``timeout`` seconds (it is never cancelled here)."""
    done, _ = await asyncio.wait({task}, timeout=timeout)
    return bool(done)
