"""``AsyncTokenEnv``: ``TokenEnv`` with awaited ``reset`` and ``step``, over ``AsyncOrsEnv``.

For trainers that keep many episodes in flight in one event loop: the same
records, the same results as ``TokenEnv``, with the environment's I/O awaited.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ors_gym.tokens._record import Read, TokenStep, over_env
from ors_gym.tokens.trajectory import Trajectory

__all__ = ["AsyncTokenEnv"]


class AsyncTokenEnv:
    """``env``: an :class:`~ors_gym.AsyncOrsEnv` (or an env with awaitable ``reset``,
    ``step``, ``messages`` and a ``tools_as``); the other arguments are ``TokenEnv``'s.
    ``close()`` closes ``env``."""

    def __init__(self, env: Any, tokenizer: Any, *, renderer: Any = None,
                 max_tokens: int | None = None, system: str | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 processor: Any = None) -> None:
        self.env = env
        self._core, self._record = over_env(env, tokenizer, renderer, chat_template_kwargs,
                                            max_tokens=max_tokens, system=system,
                                            processor=processor)
        self.tokenizer = self._record.tokenizer  # a processor's own tokenizer
        self.bridge = self._record.bridge

    @property
    def trajectory(self) -> Trajectory:
        if self._record.trajectory is None:
            raise RuntimeError("await reset() before reading the trajectory")
        return self._record.trajectory

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[int], dict[str, Any]]:
        return self._begin(*await self._open(seed, options))

    async def step(self, action: Any) -> TokenStep:
        return await self._play(self._record.read(action))

    # -- the two halves of each, for a batch that contains their failures ---------------------
    async def _open(self, seed: int | None, options: dict[str, Any] | None
                    ) -> tuple[Any, dict[str, Any], list[Any]]:
        """The environment's reset: its observation, info and opening messages."""
        observation, info = await self.env.reset(seed=seed, options=options)
        return observation, info, await self._core.messages()

    def _begin(self, observation: Any, info: dict[str, Any], opening: list[Any]
               ) -> tuple[list[int], dict[str, Any]]:
        """The record's start: the first prompt's ids and the reset info."""
        prompt = self._record.start(opening, self._core.tools_as("openai"), observation)
        return prompt, self._record.reset_info(info, observation)

    async def _play(self, read: Read) -> TokenStep:
        """The environment's step of a read turn, then the record's (which changes nothing
        if it raises)."""
        ids, logprobs, text, turn = read
        result = await self.env.step(turn)
        return self._record.finish(ids, logprobs, text, turn, tuple(result))

    async def close(self) -> None:
        await self.env.close()

    async def __aenter__(self) -> AsyncTokenEnv:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
