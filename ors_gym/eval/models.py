"""The models ``ors-gym eval`` talks to: an OpenAI-compatible endpoint, or ``ScriptedLLM``.

A model here is anything with ``async respond(messages, tools) -> ModelReply``:
``messages`` is the conversation so far as OpenAI chat dicts, ``tools`` the
session's tools in OpenAI's function-calling format (``env.tools_as("openai")``).
The reply carries the assistant message (an OpenAI chat message dict, which
``OrsEnv.step`` accepts as it is) and the token usage the endpoint reported.

An endpoint failure (an HTTP error status, a refused connection, a timeout,
a reply with no message) is raised as :class:`ModelEndpointError`, whose
``reason`` (``http_500``, ``connection``, ``timeout``...) is what the
evaluation counts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ors_gym.errors import OrsDependencyError
from ors_gym.scripted import ScriptedLLM

__all__ = [
    "SCRIPTED",
    "ChatModel",
    "ModelEndpointError",
    "ModelReply",
    "OpenAIChatModel",
    "ScriptedChatModel",
]

#: The ``model`` name that runs :class:`~ors_gym.scripted.ScriptedLLM` with no endpoint.
SCRIPTED = "scripted"


class ModelEndpointError(Exception):
    """The model endpoint failed to answer; ``reason`` is a short machine-readable cause."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True)
class ModelReply:
    """One assistant turn: the OpenAI chat ``message`` dict and the ``usage`` (None if not
    reported: ``prompt_tokens``, ``completion_tokens``, ``total_tokens``)."""

    message: dict[str, Any]
    usage: dict[str, int] | None = None


class ChatModel(Protocol):
    """What the evaluation loop calls for each turn."""

    name: str

    async def respond(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> ModelReply: ...

    async def aclose(self) -> None: ...


class ScriptedChatModel:
    """:class:`~ors_gym.scripted.ScriptedLLM` answering in process, deterministically.

    Each reply comes from a ``ScriptedLLM`` seeded from ``seed`` and the
    conversation, so a conversation gets the same reply whatever ran before it
    (episodes run concurrently, in any order). No usage is reported.
    """

    name = SCRIPTED

    def __init__(self, seed: int = 0, **options: Any) -> None:
        self.seed = seed
        self.options = options

    async def respond(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> ModelReply:
        llm = ScriptedLLM("openai", seed=conversation_seed(messages, self.seed), **self.options)
        return ModelReply(dict(llm.act(list(messages), list(tools))))

    async def aclose(self) -> None:
        return None


def conversation_seed(messages: Sequence[Any], seed: int = 0) -> int:
    """A seed fixed by ``seed`` and the conversation's content (stable across processes)."""
    import hashlib

    text = json.dumps(list(messages), sort_keys=True, default=str)
    digest = hashlib.sha256(f"{seed}:{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class OpenAIChatModel:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint (``AsyncOpenAI``).

    ``base_url`` is the API root (``http://host:port/v1``); ``api_key`` defaults
    to the client's own (``OPENAI_API_KEY``), or a placeholder for local servers
    that want none. ``max_retries`` and ``timeout`` go to the client;
    ``temperature`` (None: the endpoint's default) to each request.
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        max_retries: int = 2,
        timeout: float = 120.0,
        temperature: float | None = None,
    ) -> None:
        openai = _require_openai()
        import os

        key = api_key or os.environ.get("OPENAI_API_KEY") or "none"
        self.name = name
        self.temperature = temperature
        self._openai = openai
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=key, max_retries=max_retries, timeout=timeout
        )

    async def respond(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> ModelReply:
        openai = self._openai
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = list(tools)
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        try:
            completion = await self._client.chat.completions.create(
                model=self.name, messages=list(messages), **extra
            )
        except openai.APITimeoutError as exc:
            raise ModelEndpointError("timeout", str(exc)) from exc
        except openai.APIConnectionError as exc:
            raise ModelEndpointError("connection", str(exc)) from exc
        except openai.APIStatusError as exc:
            raise ModelEndpointError(f"http_{exc.status_code}", _status_text(exc)) from exc
        except openai.APIError as exc:
            raise ModelEndpointError("bad_response", str(exc)) from exc
        if not completion.choices:
            raise ModelEndpointError("bad_response", "the completion has no choices")
        message = completion.choices[0].message.model_dump(mode="json", exclude_none=True)
        message.setdefault("content", None)
        usage = completion.usage
        counts = None
        if usage is not None:
            counts = {
                "prompt_tokens": int(usage.prompt_tokens or 0),
                "completion_tokens": int(usage.completion_tokens or 0),
                "total_tokens": int(usage.total_tokens or 0),
            }
        return ModelReply(message, counts)

    async def aclose(self) -> None:
        await self._client.close()


def _status_text(exc: Any) -> str:
    return f"the endpoint answered {exc.status_code}: {str(exc)[:300]}"


def _require_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise OrsDependencyError(
            "evaluating a model behind an endpoint needs the openai client: "
            "pip install 'ors-gym[eval]'"
        ) from exc
    return openai
