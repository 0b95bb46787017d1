"""``OrsRolloutWorker``: ORS token episodes for TRL's ``AsyncGRPOTrainer(rollout_worker=...)``.

TRL's asynchronous trainer takes any rollout worker with ``start``, ``stop``,
``update_model_version``, ``check_health``, a ``rollout_buffer`` of scored
``RolloutSample``s and a ``metrics_queue``. This one plays each task's
``num_generations`` episodes as exact token episodes (``ors_gym.tokens``: every model
family read as ``TokenEnv`` reads it), sampling from a token-in/token-out server
(:mod:`ors_gym.sampling`: vLLM's ``/v1/completions``, SGLang's ``/generate``). Its
event loop runs in a thread of its own; each group's episodes run free
(``AsyncTokenBatch.run_free``, see ``_worker_loop``).
Needs the ``trl`` extra for TRL's ``RolloutSample``.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.sampling import TokenSampler
from ors_gym.tokens import EpisodeRow, is_processor
from ors_gym.trl._worker_loop import LoopSettings, _Hooks, run_groups

__all__ = ["OrsRolloutWorker"]

logger = logging.getLogger("ors_gym")

_STOP_TIMEOUT_S = 30.0


class OrsRolloutWorker:
    """A ``RolloutWorkerProtocol`` over ORS token episodes, free-running.

    ``source``: an :class:`~ors_gym.trl.OrsSpec` (its dataset's rows, its environments'
    arguments and its ``token_kwargs``) or a sequence of :class:`~ors_gym.tokens.EpisodeRow`
    (or dataset rows ``EpisodeRow.from_row`` reads), cycled in order, one group per row.
    ``tokenizer``: the policy's; its model family is read as ``TokenEnv`` reads it
    (``renderer``, ``system`` and ``chat_template_kwargs`` are ``TokenEnv``'s).
    ``sampler``: a :class:`~ors_gym.sampling.TokenSampler` (the worker closes its client
    when it stops). ``max_tokens``: each episode's sampled-token budget (all turns; the
    environment's tokens between them are not charged to it); ``max_model_len``: the
    server's context, so no turn asks past it (an episode with no room left ends with
    ``context_overflow``, ungraded). ``max_episodes``: episodes in flight at once (at
    least ``num_generations``: a group starts when all its episodes fit).
    ``max_staleness``: a group whose oldest turn is more versions behind the live policy
    than this when it is scored is dropped (set it to the trainer's ``max_staleness``;
    None keeps every group). ``score_group``: add the
    environment's ``score_group`` to the returns (None: where the environment has one).
    ``queue_maxsize``: the ``rollout_buffer``'s bound (0: none); a full buffer holds
    scoring back. ``max_groups``: play this many groups, then idle (None: cycle the rows
    for as long as the worker runs). A vision model's processor is refused (a
    ``RolloutSample`` carries no images).
    """

    def __init__(
        self,
        source: Any,
        tokenizer: Any,
        sampler: TokenSampler,
        *,
        num_generations: int = 8,
        max_tokens: int = 1024,
        max_model_len: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_episodes: int = 64,
        max_staleness: int | None = 4,
        score_group: bool | None = None,
        queue_maxsize: int = 0,
        max_groups: int | None = None,
        renderer: Any = None,
        system: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        for name, value in (("num_generations", num_generations), ("max_tokens", max_tokens),
                            ("max_episodes", max_episodes)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if max_episodes < num_generations:
            raise ValueError(f"max_episodes ({max_episodes}) must be at least num_generations "
                             f"({num_generations}): a group's episodes start together")
        if max_groups is not None and (not isinstance(max_groups, int) or max_groups < 1):
            raise ValueError(f"max_groups must be a positive int or None, got {max_groups!r}")
        if max_staleness is not None and max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0 or None, got {max_staleness!r}")
        if not isinstance(sampler, TokenSampler):
            raise TypeError("sampler must be a TokenSampler (ors_gym.sampling.VllmCompletions, "
                            f"SglangGenerate or one of your own), got {type(sampler).__name__}")
        self._rows, token_kwargs = _rows_of(source)
        if token_kwargs.get("processor") is not None or is_processor(tokenizer):
            raise ValueError(
                "TRL's RolloutSample carries no images and a TokenSampler takes no pixels: a "
                "vision model's processor cannot be used here. Pass the processor's text "
                "tokenizer (images then reach the model as a note), or train a vision model "
                "with veRL's 'ors' agent loop")
        token_kwargs.update({k: v for k, v in (("renderer", renderer), ("system", system),
                                               ("chat_template_kwargs", chat_template_kwargs))
                             if v is not None})
        self.tokenizer = tokenizer
        self.sampler = sampler
        bridge = _bridge(tokenizer, token_kwargs)
        if not bridge.multimodal:  # one bridge serves every episode (it keeps no state)
            token_kwargs["renderer"] = bridge
        self.settings = LoopSettings(
            num_generations=num_generations, max_tokens=max_tokens, max_model_len=max_model_len,
            temperature=temperature, top_p=top_p, max_episodes=max_episodes,
            max_staleness=max_staleness, score_group=score_group,
            max_groups=max_groups, token_kwargs=token_kwargs)
        self.rollout_buffer: queue.Queue[Any] = queue.Queue(maxsize=queue_maxsize)
        self.metrics_queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=4096)
        self._version = 0
        self._progress = time.monotonic()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._work: asyncio.Task[None] | None = None  # run_groups, cancelled once to end
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopping = False
        self._played = False  # max_groups played: idle, not stalled

    # -- RolloutWorkerProtocol -----------------------------------------------------------
    @property
    def model_version(self) -> int:
        """The live policy version (what each turn sampled from now is tagged with)."""
        return self._version

    def update_model_version(self, model_version: int) -> None:
        self._version = int(model_version)

    def start(self) -> None:
        """Start the worker's thread and event loop; episodes begin at once."""
        if self._thread is not None and self._thread.is_alive():
            logger.warning("OrsRolloutWorker.start() called while running; ignored")
            return
        sample_class = _rollout_sample_class()
        self._error, self._stopping, self._played = None, False, False
        self._progress = time.monotonic()
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, args=(sample_class,),
                                        name="ors-rollout-worker", daemon=True)
        self._thread.start()
        self._ready.wait(_STOP_TIMEOUT_S)

    def stop(self) -> None:
        """Cancel every episode (each gives its session back), close the environment pool
        and the sampler's client, and end the thread. Safe twice."""
        thread, loop = self._thread, self._loop
        self._stopping = True
        if thread is None:
            return
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._end_work)
            except RuntimeError:  # the loop closed meanwhile
                pass
        thread.join(_STOP_TIMEOUT_S)
        if thread.is_alive():
            logger.warning("OrsRolloutWorker: the worker thread did not end within %g s",
                           _STOP_TIMEOUT_S)
        self._thread = None

    def check_health(self, stale_after_s: float) -> None:
        """Raise if the worker's loop died, or made no progress (no turn sampled, no step
        returned, no group scored) for ``stale_after_s`` seconds (not once it has played
        ``max_groups``)."""
        if self._error is not None:
            raise RuntimeError(f"OrsRolloutWorker failed: {self._error!r}") from self._error
        if self._thread is None or self._stopping or self._played:
            return
        if not self._thread.is_alive():
            raise RuntimeError("OrsRolloutWorker's thread has ended without stop()")
        idle = time.monotonic() - self._progress
        if idle > stale_after_s:
            raise RuntimeError(f"OrsRolloutWorker made no progress for {idle:.0f} s "
                               f"(more than {stale_after_s:g} s): no turn sampled, no tool "
                               "returned and no group scored; is the inference server up?")

    # -- the thread ----------------------------------------------------------------------
    def _run(self, sample_class: type) -> None:
        try:
            with asyncio.Runner() as runner:
                runner.run(self._serve(sample_class))
        except BaseException as exc:
            if self._error is None:  # the first failure is the cause; keep it
                self._error = exc
            logger.error("OrsRolloutWorker's loop died: %r", self._error,
                         exc_info=self._error)
        finally:
            self._ready.set()

    async def _serve(self, sample_class: type) -> None:
        """Run the groups in a task of their own, so that ending them (``stop()``, a
        fatal error) cancels that task once and never this one: the pool's and the
        sampler's closing below run to their end."""
        self._loop = asyncio.get_running_loop()
        hooks = _Hooks(lambda: self._version, self._beat, self._emit, self._push_metrics,
                       self._idle)
        self._work = asyncio.create_task(run_groups(
            self._rows, self.tokenizer, self.sampler, self.settings, hooks, sample_class,
            self._fatal))
        self._ready.set()
        try:
            await self._work
        except asyncio.CancelledError:
            if self._error is not None:
                raise self._error from None
            if not self._stopping:
                raise
        finally:
            await self.sampler.aclose()

    def _end_work(self) -> None:
        """Cancel the groups' task, once: a second cancel would cut its cleanup short."""
        work = self._work
        if work is not None and not work.done() and not work.cancelling():
            work.cancel()

    def _fatal(self, exc: BaseException) -> None:
        """A group task failed for a reason of its own (not an episode's): the loop ends."""
        if self._error is None:
            self._error = exc
        self._end_work()

    def _idle(self) -> None:
        self._played = True

    def _beat(self) -> None:
        self._progress = time.monotonic()

    def _push_metrics(self, values: dict[str, Any]) -> None:
        try:
            self.metrics_queue.put_nowait(values)
        except queue.Full:
            pass  # never hold generation up for metrics

    async def _emit(self, samples: list[Any]) -> None:
        waited = None
        for sample in samples:
            while True:
                sample.enqueued_at = time.time()
                try:
                    self.rollout_buffer.put_nowait(sample)
                    break
                except queue.Full:  # the trainer is behind: wait, still alive
                    waited = waited or time.monotonic()
                    self._beat()
                    await asyncio.sleep(0.05)
        if waited is not None:
            self._push_metrics({"rollout/backpressure_s": time.monotonic() - waited})

    def __repr__(self) -> str:
        state = "running" if self._thread is not None and self._thread.is_alive() else "stopped"
        return (f"OrsRolloutWorker({len(self._rows)} rows x {self.settings.num_generations}, "
                f"{self.sampler!r}, {state})")


def _rows_of(source: Any) -> tuple[list[EpisodeRow], dict[str, Any]]:
    """The episode rows and default ``TokenEnv`` arguments of a spec or a row sequence."""
    from ors_gym.trl._spec import OrsSpec
    from ors_gym.trl._token_rollout import TASK_ENV, TASK_INDEX

    if isinstance(source, OrsSpec):
        kwargs = source._kwargs  # the ids' gymnasium.make arguments, as rollout_func uses
        rows = [EpisodeRow(p[-1][TASK_ENV], dict(kwargs[p[-1][TASK_ENV]]),
                           {"index": int(p[-1][TASK_INDEX]), "split": source.split})
                for p in source.train_dataset["prompt"]]
        return rows, dict(source._token_kwargs)
    if isinstance(source, (str, bytes)) or not isinstance(source, Sequence):
        raise TypeError("source must be an OrsSpec or a sequence of EpisodeRow (or dataset rows "
                        f"naming env_id and index), got {type(source).__name__}")
    rows = [r if isinstance(r, EpisodeRow) else EpisodeRow.from_row(r) for r in source]
    if not rows:
        raise ValueError("source has no rows: give at least one task to play")
    return rows, {}


def _bridge(tokenizer: Any, token_kwargs: Mapping[str, Any]) -> Any:
    """The family's bridge, as ``TokenEnv`` makes it (its ``stops`` end each sampled turn)."""
    from ors_gym.tokens import make_bridge

    return make_bridge(tokenizer, token_kwargs.get("renderer"),
                       token_kwargs.get("chat_template_kwargs"))


def _rollout_sample_class() -> type:
    """TRL's ``RolloutSample`` (what ``AsyncGRPOTrainer`` reads from the buffer)."""
    try:
        from trl.experimental.async_grpo.async_rollout_worker import RolloutSample
    except ImportError as exc:
        from ors_gym.errors import OrsDependencyError

        raise OrsDependencyError(
            "OrsRolloutWorker hands TRL RolloutSample objects to AsyncGRPOTrainer: "
            "pip install 'ors-gym[trl]' (trl>=1.16)") from exc
    return RolloutSample
