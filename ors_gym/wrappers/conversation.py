"""``Conversation``: an ORS environment whose observation is the whole chat so far.

An LLM agent does not act on the latest tool output alone but on the
conversation: the task prompt, each of its own turns (text and tool calls with
ids) and each tool result, tied to its call. This wrapper keeps that
transcript and returns it as the observation, ready to send to a chat API::

    env = Conversation(gym.make("ors/Math-v0"), format="openai")
    messages, info = env.reset(seed=0)
    reply = client.chat.completions.create(model=..., messages=messages,
                                           tools=env.api_tools()).choices[0].message
    messages, reward, terminated, truncated, info = env.step(reply)

Actions are whatever the model client returned (see
:func:`ors_gym.formats.as_action`) or any action ``OrsEnv`` takes. The
conversation starts from the task's own messages (``/messages``: multi-turn
prompts, or the prompt as one user message on servers without it; also in
``info["messages"]``); each step adds the assistant turn and the environment's
reply (:func:`~ors_gym.formats.step_exchange`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium import spaces

from ors_gym.families import check_tool_format, tokenizer_family
from ors_gym.formats import (
    MESSAGE_FORMATS,
    StepExchange,
    as_block,
    assistant_turn,
    exchange_messages,
    render_messages,
    step_exchange,
    tools_as,
)
from ors_gym.protocol import Message, TextBlock

__all__ = ["Conversation", "ConversationSpace"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_TOOL_FORMAT = {"openai": "openai", "anthropic": "anthropic", "ors": "json_schema"}


class ConversationSpace(spaces.Space[list[Any]]):
    """Conversations: lists of role-tagged messages in one format.

    ``"openai"`` and ``"anthropic"``: dicts with a ``role``; ``"ors"``:
    :class:`~ors_gym.protocol.Message` objects (or their dicts).
    """

    def __init__(self, format: str = "openai", seed: Any = None) -> None:
        if format not in MESSAGE_FORMATS:
            raise ValueError(f"format={format!r}; choose one of {list(MESSAGE_FORMATS)}")
        super().__init__(shape=None, dtype=None, seed=seed)
        self.format = format

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list):
            return False
        for message in x:
            if isinstance(message, Message):
                continue
            if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
                return False
            if self.format == "ors" and "blocks" not in message:
                return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> list[Any]:
        """A one-message conversation: a user turn with a random number in it."""
        text = f"Hello {int(self.np_random.integers(1000))}"
        return render_messages([Message(role="user", blocks=[TextBlock(text=text)])], self.format)

    def to_jsonable(self, sample_n: Any) -> list[Any]:
        return [
            [m.model_dump(mode="json") if isinstance(m, Message) else dict(m) for m in sample]
            for sample in sample_n
        ]

    def from_jsonable(self, sample_n: list[Any]) -> list[Any]:
        if self.format != "ors":
            return [list(sample) for sample in sample_n]
        return [[Message.model_validate(m) for m in sample] for sample in sample_n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConversationSpace) and other.format == self.format

    def __hash__(self) -> int:
        return hash(("ConversationSpace", self.format))

    def __repr__(self) -> str:
        return f"ConversationSpace({self.format!r})"


class Conversation(gym.Wrapper[list[Any], Any, Any, Any], gym.utils.RecordConstructorArgs):
    """The conversation so far as the observation, in ``format``.

    ``format``: ``"openai"`` (chat-completions message dicts), ``"anthropic"``
    (Messages API dicts; the system prompt is not a message there, pass
    ``conversation.system`` separately) or ``"ors"`` (ORS ``Message`` objects).
    ``system`` is an optional system prompt put first. ``info["exchange"]``
    holds each step's :class:`~ors_gym.formats.StepExchange` and
    ``info["observation"]`` the wrapped env's own observation.

    A model's raw completion text (a ``/v1/completions`` endpoint, a local
    ``generate``) is read by its family's rules: ``tool_format`` names the family
    (``"qwen3.5"``, ``"gpt-oss"``...; default: the env's own ``tool_format``), or
    ``tokenizer`` is the model's, whose family is found from its chat template;
    :meth:`prompt_text` then renders the conversation, tools included, as that
    template does.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        format: str = "openai",
        *,
        system: str | None = None,
        tool_format: str | None = None,
        tokenizer: Any = None,
    ) -> None:
        if format not in MESSAGE_FORMATS:
            raise ValueError(f"format={format!r}; choose one of {list(MESSAGE_FORMATS)}")
        gym.utils.RecordConstructorArgs.__init__(
            self, format=format, system=system, tool_format=tool_format, tokenizer=tokenizer
        )
        super().__init__(env)
        self.format = format
        self.system = system
        self.tokenizer = tokenizer
        if tool_format is None and tokenizer is not None:
            tool_format = tokenizer_family(tokenizer)
        if tool_format is None:
            settings = getattr(env.unwrapped, "settings", None)
            tool_format = getattr(settings, "tool_format", None)
        if tool_format is not None:
            check_tool_format(tool_format)
        self.tool_format: str | None = tool_format
        self.observation_space = ConversationSpace(format)
        self._ors: list[Message] = []
        self._rendered: list[Any] = []
        self._steps = 0

    @property
    def messages(self) -> list[Any]:
        """The conversation in this wrapper's format (a new list each time)."""
        return list(self._rendered)

    @property
    def ors_messages(self) -> list[Message]:
        """The conversation as ORS messages (what group scoring sends)."""
        return list(self._ors)

    def api_tools(self, fmt: str | None = None) -> list[dict[str, Any]]:
        """The session's tools for the model (see :func:`~ors_gym.formats.tools_as`);
        by default in this conversation's format (JSON Schema for ``"ors"``)."""
        return tools_as(self.env.unwrapped.tools, fmt or _TOOL_FORMAT[self.format])  # type: ignore[attr-defined]

    def prompt_text(self) -> str:
        """The conversation and its tools as ``tokenizer``'s chat template renders them for
        the model's next turn (the family's own tool prompt): a raw completion's prompt."""
        if self.tokenizer is None:
            raise ValueError(
                "prompt_text() renders with the model's chat template: construct "
                "Conversation(env, tokenizer=<the model's tokenizer>)"
            )
        return str(
            self.tokenizer.apply_chat_template(
                render_messages(self._ors, "openai"),
                tools=self.api_tools("openai") or None,
                tokenize=False,
                add_generation_prompt=True,
            )
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Any], dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        prompt = info.get("blocks")
        if prompt is None:
            raise TypeError(
                "Conversation needs an ORS environment (OrsEnv, or gym.make('ors/...')): "
                "the wrapped env's reset info has no 'blocks' (the prompt)"
            )
        self._ors, self._rendered, self._steps = [], [], 0
        if self.system is not None:
            self._add([Message(role="system", blocks=[TextBlock(text=self.system)])])
        ask = getattr(self.env.unwrapped, "messages", None)
        if callable(ask):  # an OrsEnv: the task's own conversation (multi-turn prompts)
            opening = list(ask())
        else:
            opening = [Message(role="user", blocks=[as_block(b) for b in prompt])]
        self._add(opening)
        info = dict(info)
        info["observation"] = observation
        info["messages"] = opening
        return self.messages, info

    def step(
        self, action: Any
    ) -> tuple[list[Any], SupportsFloat, bool, bool, dict[str, Any]]:
        if not self._ors:
            raise gym.error.ResetNeeded("call reset() before step()")
        self._steps += 1
        turn = assistant_turn(
            action, step=self._steps, tool_format=self.tool_format,
            tools=lambda: self.api_tools("openai"),
        )
        # The calls as read here go to the env as they are: one parse per action.
        observation, reward, terminated, truncated, info = self.env.step(turn)
        exchange: StepExchange = step_exchange(turn, info)
        self._add(exchange_messages(exchange))
        info = dict(info)
        info["exchange"] = exchange
        info["observation"] = observation
        return self.messages, reward, terminated, truncated, info

    def _add(self, messages: list[Message]) -> None:
        self._ors.extend(messages)
        self._rendered.extend(render_messages(messages, self.format))
