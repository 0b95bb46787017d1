"""``OrsAgentLoop``: veRL's agent loop over any ORS environment, as exact tokens.

veRL makes one agent loop per sample and awaits ``run(sampling_params,
**row)``. This one opens the row's ORS episode (``extra_info``: ``env_id``,
``split``, ``index``...) as a token batch of one, over the worker's shared
backends (``ors_gym.tokens.shared_pool()``: one per environment on the
worker's event loop, so a sample opens no connection and repeats no tool
discovery) and one bridge per tokenizer, and plays it with the lockstep driver
(``ors_gym.tokens.lockstep``), veRL's server manager as its sampler: each
completion is asked for from the token sequence so far, and the sampled ids and
logprobs go to the env verbatim. The env's tokens (tool results, template
tags) come back with mask 0; the reward is the env's own grade, so veRL's
reward function is not called for these samples.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

from ors_gym.errors import OrsDependencyError
from ors_gym.sampling import FinishReason, Sample
from ors_gym.tokens import AsyncTokenBatch, Bridge, EpisodeRow, make_bridge, shared_pool
from ors_gym.tokens.lockstep import run_lockstep
from ors_gym.verl._output import agent_loop_output

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
    from verl.utils.profiler import simple_timer
    from verl.utils.rollout_trace import rollout_trace_op
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise OrsDependencyError("ors_gym.verl needs verl: pip install 'ors-gym[verl]'") from exc

__all__ = ["OrsAgentLoop"]

logger = logging.getLogger(__name__)


@register("ors")
class OrsAgentLoop(AgentLoopBase):
    """veRL agent loop ``ors``: one ORS episode per sample, as token ids.

    The episode's tokens are capped at ``rollout.response_length`` (the env
    truncates with ``stop_reason="max_tokens"``); a sample whose first prompt
    is over ``rollout.prompt_length`` ends at once with ``context_overflow``
    (masked, reward 0; the others go on). ``data.apply_chat_template_kwargs`` reach the
    chat template. veRL's own ``tools`` (its tool config) are not used: the ORS
    environment brings its tools.
    """

    def __init__(self, *args: Any, tools: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    @rollout_trace_op
    async def run(
        self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any
    ) -> AgentLoopOutput:
        row = EpisodeRow.from_row(kwargs)
        template = dict(self.apply_chat_template_kwargs or {})
        # the worker's backends (one per environment, shared by every sample on its loop)
        # a vision model's processor (veRL's) renders the images; one bridge serves all samples
        processor = getattr(self, "processor", None)
        batch = AsyncTokenBatch(self.tokenizer,
                                renderer=_bridge(self.tokenizer, template, processor),
                                max_tokens=self.response_length, pool=shared_pool())
        # one id per episode: the server routes its turns to one replica, keeping its prefix cache
        full_determinism = getattr(self.rollout_config, "full_determinism", False)
        request_id = f"det-{int(priority)}" if full_determinism else uuid4().hex
        sampler = _ServerSampler(self.server_manager, request_id, sampling_params,
                                 batch if processor else None)
        try:
            (trajectory,) = await run_lockstep(
                batch, [row], sampler, max_prompt=self.prompt_length,
                max_prompt_name="rollout.prompt_length")
            metrics = sampler.metrics()
        finally:
            await batch.close()  # the session, if still open; the shared backends stay
        if trajectory.step_wise:
            logger.warning(
                "%s: the chat template rewrote the history, so only the episode's last token "
                "row (%d of %d) is trained on; use a template that keeps history",
                row.env_id, len(trajectory.rows), len(trajectory.rows),
            )
        return agent_loop_output(trajectory, response_length=self.response_length,
                                 prompt_length=self.prompt_length, metrics=metrics)


class _ServerSampler:
    """veRL's server manager as a ``TokenSampler`` for one sample's episode: its request id
    and sampling parameters, the row's images for a vision model (``batch``: the episode's
    batch of one), and the loop's timings (``generate_sequences``; ``tool_calls``, the
    time between a completion's return and the next request or the end)."""

    def __init__(self, server: Any, request_id: str, params: dict[str, Any],
                 batch: AsyncTokenBatch | None) -> None:
        self.server, self.request_id, self.params, self.batch = server, request_id, params, batch
        self.timings: dict[str, Any] = {}
        self.preempted: list[int] = []
        self._returned: float | None = None

    async def sample(self, prompt_ids: Sequence[int], *, max_tokens: int,
                     stop_token_ids: Sequence[int] = (), temperature: float = 1.0,
                     top_p: float = 1.0, logprobs: bool = True) -> Sample:
        self._tools_since_return()
        params = {**self.params, "max_tokens": max(1, max_tokens)}  # veRL's own sampling
        images = {"image_data": self.batch.trajectories[0].rows[-1].images} if self.batch else {}
        with simple_timer("generate_sequences", self.timings):
            out = await self.server.generate(request_id=self.request_id,
                                             prompt_ids=list(prompt_ids),
                                             sampling_params=params, **images)
        self._returned = time.perf_counter()
        if out.num_preempted is not None:
            self.preempted.append(int(out.num_preempted))
        ids = list(out.token_ids)
        finish: FinishReason = "stop" if ids and ids[-1] in stop_token_ids else "length"
        return Sample(ids, list(out.log_probs) if out.log_probs else None, finish)

    async def aclose(self) -> None:
        return None

    def metrics(self) -> dict[str, Any]:
        """The loop's metrics for ``AgentLoopMetrics`` (``num_preempted`` -1: not reported)."""
        self._tools_since_return()
        return {**self.timings,
                "num_preempted": sum(self.preempted) if self.preempted else -1}

    def _tools_since_return(self) -> None:
        if self._returned is not None:
            spent = time.perf_counter() - self._returned
            self.timings["tool_calls"] = self.timings.get("tool_calls", 0.0) + spent
            self._returned = None


#: One bridge per tokenizer and template arguments, shared by the worker's samples.
_BRIDGES: weakref.WeakKeyDictionary[Any, dict[str, Bridge]] = weakref.WeakKeyDictionary()


def _bridge(tokenizer: Any, template: dict[str, Any], processor: Any = None) -> Bridge:
    """The bridge (kept per tokenizer, template arguments and processor): each row keeps
    its own images, so one bridge serves every sample, a vision model's too."""
    key = repr((sorted(template.items()), id(processor)))
    try:
        per_tokenizer = _BRIDGES.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced: a bridge each time
        return make_bridge(tokenizer, None, template, processor)
    bridge = per_tokenizer.get(key)
    if bridge is None:
        bridge = per_tokenizer[key] = make_bridge(tokenizer, None, template, processor)
    return bridge
