"""``OrsTextEnv``: one ORS episode as a SkyRL-gym ``BaseTextEnv``.

SkyRL's generator makes one env per trajectory from a dataset row
(``skyrl_gym.make(env_class, env_config=..., extras=row)``), calls
``init(prompt)``, then ``step(model_text)`` until ``done``, then ``close()``.
The row's extras name the task (``env_id``, ``split``, ``index``); the model's
text is parsed by ``OrsEnv`` (tool calls in the formats ``parse_action`` reads;
a plain message goes to the terminal tool, or ends the episode).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from ors_gym.env import OrsEnv
from ors_gym.errors import OrsDependencyError
from ors_gym.protocol import ListToolsOutput, Message

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise OrsDependencyError(
        "ors_gym.skyrl needs skyrl-gym: pip install 'ors-gym[skyrl]'"
    ) from exc

__all__ = ["OrsTextEnv", "system_prompt"]

_ROLES = frozenset({"system", "user", "assistant"})


def system_prompt(tools: ListToolsOutput) -> str:
    """A system message offering the tools, with the ``<tool_call>`` format to call them."""
    lines = [
        "You act in an environment by calling its tools. The tools, as JSON schemas:",
        "<tools>",
        *(json.dumps(t["function"], sort_keys=True) for t in _openai_tools(tools)),
        "</tools>",
        "To call a tool, write its name and arguments as JSON in tags:",
        '<tool_call>\n{"name": "<tool>", "arguments": {...}}\n</tool_call>',
    ]
    if tools.terminal_tool is not None:
        lines.append("To give your final answer, reply in plain text without a tool call.")
    return "\n".join(lines)


def _openai_tools(tools: ListToolsOutput) -> list[dict[str, Any]]:
    from ors_gym.formats import tools_as

    return tools_as(tools, "openai")


class OrsTextEnv(BaseTextEnv):
    """An ORS environment for SkyRL (``register()`` makes it ``skyrl_gym.make``-able).

    ``extras`` (the dataset row): ``env_id`` (a ``gymnasium.make`` id), ``split``,
    ``index`` (or ``task_index``), optional ``max_turns`` and ``env_kwargs``.
    ``env_config``: optional ``env_kwargs`` for every episode (``base_url``...).
    A plain reply ends an episode whose environment has no terminal tool
    (``no_tool_call="terminate"``, unless ``env_kwargs`` say otherwise).
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        extras = dict(extras or {})
        if "env_id" not in extras:
            raise ValueError(
                "OrsTextEnv needs extras['env_id'] (e.g. 'ors/QA-v0'): give each dataset row "
                "env_id, split and index columns (ors_gym.skyrl.rows builds them)"
            )
        self.env_id = str(extras["env_id"])
        self.split = extras.get("split")
        index = extras.get("index", extras.get("task_index"))
        self.index = None if index is None else int(index)
        self.max_turns = int(extras.get("max_turns") or _get(env_config, "max_turns") or 16)
        kwargs: dict[str, Any] = {"no_tool_call": "terminate"}
        kwargs.update(dict(_get(env_config, "env_kwargs") or {}))
        kwargs.update(dict(extras.get("env_kwargs") or {}))
        self._made = gym.make(self.env_id, **kwargs)
        env = self._made.unwrapped
        if not isinstance(env, OrsEnv):
            self._made.close()
            raise TypeError(f"{self.env_id!r} is not an ORS environment id (it made {env!r})")
        self.env: OrsEnv = env
        self.rewards: list[float] = []

    def init(self, prompt: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode's session; the conversation is the row's own non-empty
        messages, a system message offering the tools (unless the row has one) and the
        task's prompt."""
        options: dict[str, Any] = {}
        if self.index is not None:
            options["index"] = self.index
        if self.split is not None:
            options["split"] = str(self.split)
        _, info = self.env.reset(options=options)
        given = [dict(m) for m in _as_messages(prompt) if m.get("content")]
        conversation: list[dict[str, Any]] = []
        if not any(m.get("role") == "system" for m in given):
            conversation.append({"role": "system", "content": system_prompt(self.env.tools)})
        conversation += given
        conversation += [_chat_message(m) for m in self.env.messages()]
        return conversation, {"env_id": self.env_id, "index": info.get("index")}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the tool calls written in ``action`` (or send it to the terminal tool)."""
        self.turns += 1
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.rewards.append(float(reward))
        done = bool(terminated or truncated) or self.turns >= self.max_turns
        text = str(observation["text"])
        if observation["images"]:
            text += f"\n[{len(observation['images'])} image(s) not shown: text only]"
        observations = [] if done else [
            {"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"}
        ]
        metadata = {
            "calls": [c["name"] for c in info.get("calls", [])],
            "terminated": bool(terminated),
            "truncated": bool(truncated),
        }
        return BaseTextEnvStepOutput(
            observations=observations, reward=float(reward), done=done, metadata=metadata,
            postprocessed_action=action,
        )

    def close(self) -> None:
        """Delete the session (and the env's backend)."""
        self._made.close()

    def get_metrics(self) -> dict[str, Any]:
        return {"turns": self.turns, "return": float(sum(self.rewards))}


def _get(config: Any, key: str) -> Any:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


def _as_messages(prompt: Any) -> list[Mapping[str, Any]]:
    if prompt is None:
        return []
    if isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)  # a prompt column stored as JSON text
        except ValueError:
            return [{"role": "user", "content": prompt}]
    if isinstance(prompt, Sequence):
        return [m for m in prompt if isinstance(m, Mapping)]
    raise TypeError(f"prompt must be a list of chat messages, got {type(prompt).__name__}")


def _chat_message(message: Message) -> dict[str, Any]:
    """An ORS message as a text chat message (images become a note)."""
    texts: list[str] = []
    images = 0
    for block in message.blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(str(getattr(block, "text", "")))
        elif kind == "image":
            images += 1
    if images:
        texts.append(f"[{images} image(s) not shown: text only]")
    role = message.role if message.role in _ROLES else "user"
    return {"role": role, "content": "\n".join(texts)}
