"""``TokenEnv``: an ORS environment whose observations and actions are token ids.

The observation is the whole sequence so far, ending at the next generation
prompt; the action is the ids the model sampled after it. One step::

    completion ids --the family's parse--> content, reasoning, tool calls
        --OrsEnv.step (the calls as read)--> tool results / nudge --chat messages--> bridge ids
    observation = previous observation + completion ids (verbatim) + bridge ids

The sampled ids are never re-encoded, and are parsed once, by the model family's
own rules; the reasoning stays in them and never reaches the environment.
``env.trajectory`` keeps the record (mask, logprobs, messages) and exports it for
TRL, veRL and SkyRL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium import spaces

from ors_gym.tokens._record import over_env
from ors_gym.tokens.trajectory import Trajectory

__all__ = ["TokenEnv", "TokenSpace"]


class TokenSpace(spaces.Space[list[int]]):
    """Token sequences: lists of ids in ``[0, vocab_size)``."""

    def __init__(self, vocab_size: int, seed: Any = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)
        self.vocab_size = vocab_size

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.vocab_size for t in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[int]:
        """A short random sequence (1 to 8 ids)."""
        n = int(self.np_random.integers(1, 9))
        return [int(t) for t in self.np_random.integers(0, self.vocab_size, size=n)]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenSpace) and other.vocab_size == self.vocab_size

    def __hash__(self) -> int:
        return hash(("TokenSpace", self.vocab_size))

    def __repr__(self) -> str:
        return f"TokenSpace({self.vocab_size})"


class TokenEnv(gym.Wrapper[list[int], Any, Any, Any]):
    """Token ids in, token ids out, over any ORS environment.

    ``tokenizer``: a Hugging Face tokenizer (its chat template renders the
    conversation). ``renderer``: ``None`` (the tokenizer's model family, found by
    its hub name or its chat template: the family's ``renderers`` renderer where
    it renders as the template does, else the template read by the family's
    rules; an unknown family is said at WARNING), ``"template"``, a family or
    ``renderers`` name (``"qwen3.5"``) or config, or a
    :class:`~ors_gym.tokens.Bridge`. ``max_tokens``: truncate the episode when
    the ids after the first prompt would exceed this. ``system``: a system
    prompt put first. ``chat_template_kwargs``: for the template and the renderer
    (e.g. ``{"enable_thinking": False}``). ``processor``: a vision-language model's
    processor (``Qwen3VLProcessor``, ``Gemma4Processor``...; also accepted in the
    tokenizer's place): images are rendered where the family's template puts them,
    expanded as the processor expands them, and each row keeps its own.
    """

    def __init__(self, env: gym.Env[Any, Any], tokenizer: Any, *, renderer: Any = None,
                 max_tokens: int | None = None, system: str | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 processor: Any = None) -> None:
        super().__init__(env)
        self._core, self._record = over_env(env, tokenizer, renderer, chat_template_kwargs,
                                            max_tokens=max_tokens, system=system,
                                            processor=processor)
        self.tokenizer = tokenizer = self._record.tokenizer  # a processor's own tokenizer
        self.bridge = self._record.bridge
        self.observation_space = TokenSpace(len(tokenizer))
        self.action_space = TokenSpace(len(tokenizer))

    @property
    def trajectory(self) -> Trajectory:
        """The current episode's token record (raises before the first reset)."""
        if self._record.trajectory is None:
            raise gym.error.ResetNeeded("call reset() before reading the trajectory")
        return self._record.trajectory

    @property
    def remaining_tokens(self) -> int | None:
        """How many more ids the current row may take (``max_tokens`` left), or None."""
        cap = self._record.max_tokens
        traj = self._record.trajectory
        if cap is None or traj is None:
            return cap
        return max(0, cap - len(traj.completion_ids))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[int], dict[str, Any]]:
        """Start an episode (``options`` go to the ORS env's reset); the first prompt's ids."""
        observation, info = self.env.reset(seed=seed, options=options)
        prompt = self._record.start(
            self._core.messages(), self._core.tools_as("openai"), observation
        )
        return prompt, self._record.reset_info(info, observation)

    def step(self, action: Any) -> tuple[list[int], SupportsFloat, bool, bool, dict[str, Any]]:
        """Run the sampled ids (``list[int]`` or ``{"ids", "logprobs"}``) as one turn."""
        ids, logprobs, text, turn = self._record.read(action)
        result = self.env.step(turn)
        return self._record.finish(ids, logprobs, text, turn, result)
