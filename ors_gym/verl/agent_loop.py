"""``OrsAgentLoop``: veRL's agent loop over any ORS environment, as exact tokens.

veRL makes one agent loop per sample and awaits ``run(sampling_params,
**row)``. This one opens the row's ORS episode (``extra_info``: ``env_id``,
``split``, ``index``...) as a token batch of one, over the worker's shared
backends (``ors_gym.tokens.shared_pool()``: one per environment on the
worker's event loop, so a sample opens no connection and repeats no tool
discovery) and one bridge per tokenizer, asks veRL's server manager
for each completion from the token sequence so far, and hands the sampled ids
and logprobs to the env verbatim. The env's tokens (tool results, template
tags) come back with mask 0; the reward is the env's own grade, so veRL's
reward function is not called for these samples.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any
from uuid import uuid4

from ors_gym.errors import OrsDependencyError
from ors_gym.tokens import AsyncTokenBatch, Bridge, EpisodeRow, make_bridge, shared_pool, stops
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
        metrics: dict[str, Any] = {}
        preempted: list[int] = []
        # one id per episode: the server routes its turns to one replica, keeping its prefix cache
        full_determinism = getattr(self.rollout_config, "full_determinism", False)
        request_id = f"det-{int(priority)}" if full_determinism else uuid4().hex
        try:
            (ids,), _ = await batch.reset([row])
            (trajectory,) = batch.trajectories
            if not trajectory.done and len(ids) > self.prompt_length:
                # this sample only: ended (its session given back), masked, reward 0
                logger.warning(
                    "the task's prompt of %s (%s) is %d tokens, over rollout.prompt_length="
                    "%d: the sample ends with context_overflow and is not trained on; raise "
                    "prompt_length", row.env_id, row.options, len(ids), self.prompt_length)
                await batch.end(stops.CONTEXT_OVERFLOW)
            while not trajectory.done:
                left = self.response_length - len(trajectory.completion_ids)
                params = {**sampling_params, "max_tokens": max(1, left)}
                images = {"image_data": trajectory.rows[-1].images} if processor else {}
                with simple_timer("generate_sequences", metrics):
                    out = await self.server_manager.generate(
                        request_id=request_id, prompt_ids=ids, sampling_params=params, **images
                    )
                if out.num_preempted is not None:
                    preempted.append(int(out.num_preempted))
                action: Any = list(out.token_ids)
                if out.log_probs:
                    action = {"ids": action, "logprobs": list(out.log_probs)}
                with simple_timer("tool_calls", metrics):
                    (ids,), *_ = await batch.step([action])
        finally:
            await batch.close()  # the session, if still open; the shared backends stay
        metrics["num_preempted"] = sum(preempted) if preempted else -1  # -1: not reported
        if trajectory.step_wise:
            logger.warning(
                "%s: the chat template rewrote the history, so only the episode's last token "
                "row (%d of %d) is trained on; use a template that keeps history",
                row.env_id, len(trajectory.rows), len(trajectory.rows),
            )
        return agent_loop_output(trajectory, response_length=self.response_length,
                                 prompt_length=self.prompt_length, metrics=metrics)


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
