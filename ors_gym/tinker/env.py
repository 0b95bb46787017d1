"""One ORS episode as tinker-cookbook's ``Env``, at the token level, through its renderer.

:class:`OrsMessageEnv` is tinker-cookbook's ``MessageEnv`` over an
:class:`~ors_gym.AsyncOrsEnv`: its first observation opens the episode (the
task's prompt, with the session's tools declared in the renderer's own
system message), and each step hands the renderer's parse of the completion
to the environment as calls, then appends the environment's reply to the
conversation. :class:`OrsTinkerEnv` is tinker-cookbook's own
``EnvFromMessageEnv`` around it (the renderer renders every observation and
parses every action; sampler ``length`` stops, broken framing and context
overflow end the episode as there), and gives the session back the moment
the episode ends, however it ends.

Stop reasons are tinker-cookbook's ``stop/<reason>`` metrics (one-hot, on the
last transition, with ``ors_return`` and the episode's named reward parts as
``reward_parts/<name>``): :data:`TINKER_STOP_REASONS` maps the shared stop vocabulary
(:mod:`ors_gym.tokens.stops`) to them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tinker_cookbook.rl.message_env import EnvFromMessageEnv, MessageEnv, MessageStepResult
from tinker_cookbook.rl.types import STOP_METRIC_PREFIX, InitialObservationOverflow

from ors_gym.async_env import AsyncOrsEnv
from ors_gym.formats import StepExchange, step_exchange
from ors_gym.reward_parts import add_parts, step_parts
from ors_gym.tinker._convert import (
    assistant_action,
    opening_messages,
    policy_version,
    reply_messages,
    sees_images,
    tool_specs,
)
from ors_gym.tokens import stops

__all__ = ["TINKER_STOP_REASONS", "OrsMessageEnv", "OrsTinkerEnv", "stop_reason"]

logger = logging.getLogger("ors_gym")

#: The shared stop vocabulary (:mod:`ors_gym.tokens.stops`) as tinker-cookbook stop reasons.
#: tinker-cookbook names no environment failure, so ``env_error`` keeps its own name.
TINKER_STOP_REASONS: Mapping[str, str] = stops.TINKER


def stop_reason(terminated: bool, info: Mapping[str, Any], exchange: StepExchange) -> str:
    """The tinker-cookbook stop reason of an ORS step that ended its episode: ``completed``
    when the model's plain reply ended it (graded by the terminal tool), ``tool_stopped``
    when a tool call did, else the truncation's (:data:`TINKER_STOP_REASONS`)."""
    turn = exchange.turn
    reason = stops.from_step(terminated, not terminated, info, plain=not turn.tool_calls,
                             parse_errors=bool(turn.errors))
    return TINKER_STOP_REASONS[reason or stops.MAX_TURNS]


class OrsMessageEnv(MessageEnv):
    """tinker-cookbook's ``MessageEnv`` over one ORS episode of ``env``.

    ``options`` are the reset options naming the task (``split``, ``index`` or
    ``task_spec``); ``system_prompt`` leads the renderer's system message;
    ``step_rewards`` False keeps the env's rewards out of the steps (in the
    metrics only), for a group whose reward is the environment's ``score_group``.
    """

    def __init__(
        self,
        env: AsyncOrsEnv,
        renderer: Any,
        *,
        options: Mapping[str, Any] | None = None,
        seed: int | None = None,
        system_prompt: str | None = None,
        step_rewards: bool = True,
    ) -> None:
        self.env = env
        self.renderer = renderer
        self.options = dict(options or {})
        self.seed = seed
        self.system_prompt = system_prompt
        self.step_rewards = step_rewards
        self.history: list[Any] = []
        self.ors_return = 0.0
        self.reward_parts: dict[str, float] = {}
        self.done = False

    async def initial_observation(self) -> list[Any]:
        if not self.history:
            await self.env.reset(seed=self.seed, options=self.options)
            opening = await self.env.messages()
            tools = tool_specs(self.env.tools_as("openai"))
            self.history = opening_messages(self.renderer, opening, tools, self.system_prompt)
        return self.history

    async def step(self, message: Any) -> MessageStepResult:
        turn, kept = assistant_action(message, self.env.steps + 1)
        self.history.append(kept)
        _, reward, terminated, truncated, info = await self.env.step(turn)
        exchange = step_exchange(turn, info)
        self.ors_return += float(reward)
        add_parts(self.reward_parts, step_parts(info))
        metrics: dict[str, float] = {}
        if turn.errors:
            metrics["parse_error"] = 1.0
        self.done = bool(terminated or truncated)
        if self.done:
            metrics[STOP_METRIC_PREFIX + stop_reason(terminated, info, exchange)] = 1.0
            metrics["ors_return"] = self.ors_return
            metrics.update({f"reward_parts/{k}": v for k, v in self.reward_parts.items()})
            await self.end()
        else:
            self.history += reply_messages(exchange, multimodal=sees_images(self.renderer))
        return MessageStepResult(
            reward=float(reward) if self.step_rewards else 0.0,
            episode_done=self.done,
            next_messages=self.history,
            metrics=metrics,
            logs={"tool_calls": ", ".join(c.name for c in turn.tool_calls)},
        )

    async def end(self) -> None:
        """Give the episode's session back (a hosted sandbox is billed while it is open)."""
        await self.env.end_session()


class OrsTinkerEnv(EnvFromMessageEnv):
    """tinker-cookbook's ``Env`` for one ORS episode: its ``EnvFromMessageEnv`` over an
    :class:`OrsMessageEnv`, giving the session back as soon as the episode ends, also
    when it ends outside the environment (a ``length`` stop, broken framing, context
    overflow, an exception). Takes ``EnvFromMessageEnv``'s arguments. A step's
    ``extra["policy_version"]`` (the weights' version that sampled the turn) becomes
    the transition's ``policy_version`` metric."""

    message_env: OrsMessageEnv

    async def initial_observation(self) -> Any:
        try:
            result = await super().initial_observation()
        except BaseException:
            await self.message_env.end()
            raise
        if isinstance(result, InitialObservationOverflow):
            await self.message_env.end()
        return result

    async def step(self, action: list[int], *, extra: Any = None) -> Any:
        version = policy_version(extra)
        try:
            result = await super().step(action, extra=extra)
        except BaseException:
            await self.message_env.end()
            raise
        if version is not None:  # the turn's sampler, beside its other metrics
            result.metrics["policy_version"] = float(version)
        if result.episode_done:
            await self.message_env.end()
        return result
