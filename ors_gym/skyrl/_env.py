"""``OrsTextEnv``: one ORS episode as a SkyRL-gym ``BaseTextEnv``.

SkyRL's generator makes one env per trajectory from a dataset row
(``skyrl_gym.make(env_class, env_config=..., extras=row)``), calls
``init(prompt)``, then ``step(model_text)`` until ``done``, then ``close()``.
The row's extras name the task (``env_id``, ``split``, ``index``), read as an
``ors_gym.tokens.EpisodeRow`` and opened over one backend per environment for
the whole process (no env stack per trajectory); the model's
text is parsed by ``OrsEnv`` (tool calls in the formats ``parse_action`` reads;
a plain message goes to the terminal tool, or ends the episode).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym._runtime import Runtime
from ors_gym.async_env import AsyncOrsEnv
from ors_gym.errors import OrsDependencyError
from ors_gym.protocol import ListToolsOutput, Message
from ors_gym.reward_parts import add_parts, step_parts
from ors_gym.tokens import EnvPool, EpisodeRow

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise OrsDependencyError(
        "ors_gym.skyrl needs skyrl-gym: pip install 'ors-gym[skyrl]'"
    ) from exc

__all__ = ["OrsTextEnv", "system_prompt"]

#: SkyRL calls an env's methods from its worker threads: every episode runs on this one
#: event loop, over one backend per environment (``_POOL``, used on it only).
_RUNTIME = Runtime("ors-skyrl")
_POOL = EnvPool(on_error="raise")


async def _open(row: EpisodeRow) -> AsyncOrsEnv:
    return _POOL.env(row)

_ROLES = frozenset({"system", "user", "assistant"})


def system_prompt(tools: ListToolsOutput, tool_format: str | None = None) -> str:
    """A system message offering the tools, with a call written as the model's family
    writes it (``tool_format``, the env's; Hermes ``<tool_call>`` JSON when None)."""
    from ors_gym.families import call_example

    lines = [
        "You act in an environment by calling its tools. The tools, as JSON schemas:",
        "<tools>",
        *(json.dumps(t["function"], sort_keys=True) for t in _openai_tools(tools)),
        "</tools>",
        "To call a tool, write its name and arguments as in this call:",
        call_example(tool_format or "hermes", "<tool>", {"<argument>": "<value>"}),
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
        options: dict[str, Any] = {}
        if self.index is not None:
            options["index"] = self.index
        if self.split is not None:
            options["split"] = str(self.split)
        self.row = EpisodeRow(self.env_id, kwargs, options)
        self.env: AsyncOrsEnv = _RUNTIME.run(_open(self.row))
        self.rewards: list[float] = []
        self.reward_parts: dict[str, float] = {}

    def init(self, prompt: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode's session; the conversation is the row's own non-empty
        messages, a system message offering the tools (unless the row has one) and the
        task's prompt."""
        info, opening = _RUNTIME.run(self._reset())
        given = [dict(m) for m in _as_messages(prompt) if m.get("content")]
        conversation: list[dict[str, Any]] = []
        if not any(m.get("role") == "system" for m in given):
            prompt = system_prompt(self.env.tools, self.env.settings.tool_format)
            conversation.append({"role": "system", "content": prompt})
        conversation += given
        conversation += [_chat_message(m) for m in opening]
        return conversation, {"env_id": self.env_id, "index": info.get("index")}

    async def _reset(self) -> tuple[dict[str, Any], list[Message]]:
        self.env.prefetch_messages = True
        _, info = await self.env.reset(options=self.row.options)
        return info, await self.env.messages()

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the tool calls written in ``action`` (or send it to the terminal tool); the
        session is given back when the episode ends."""
        self.turns += 1
        observation, reward, terminated, truncated, info = _RUNTIME.run(self._step(action))
        self.rewards.append(float(reward))
        parts = step_parts(info)
        add_parts(self.reward_parts, parts)
        done = bool(terminated or truncated) or self.turns >= self.max_turns
        if done:
            _RUNTIME.run(self.env.end_session())
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
            "reward_parts": parts,
        }
        return BaseTextEnvStepOutput(
            observations=observations, reward=float(reward), done=done, metadata=metadata,
            postprocessed_action=action,
        )

    async def _step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return await self.env.step(action)

    def close(self) -> None:
        """Delete the session (the environment's backend stays, shared by the episodes)."""
        _RUNTIME.run(self.env.close())

    def get_metrics(self) -> dict[str, Any]:
        """The episode's turns, return and named reward parts (``reward_parts/<name>``)."""
        return {"turns": self.turns, "return": float(sum(self.rewards)),
                **{f"reward_parts/{k}": v for k, v in sorted(self.reward_parts.items())}}


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
