"""One TRL rollout over one ORS session: ``reset`` plus the environment's tools.

TRL builds instances once (``environment_factory``), then calls ``reset(**row)``
for each rollout and the instance's public functions as the model's tools.
Everything else on the class is private or a property, so that TRL offers
nothing else to the model. The wrapped ``OrsEnv`` deletes its session at the
next ``reset``, when the instance is dropped, and at interpreter exit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from ors_gym.env import OrsEnv
from ors_gym.protocol import TerminalToolSpec, ToolSpec
from ors_gym.trl._tools import attribute_name, tool_function

logger = logging.getLogger("ors_gym")

__all__ = ["ENDED_TEXT", "OrsRollout", "rollout_class"]

#: What a tool call answers once the episode has finished.
ENDED_TEXT = "The episode has ended: this tool call was not run. Reply without calling a tool."
_RESERVED = frozenset({"reset", "get_reward", "env", "reward", "rewards", "finished"})


class OrsRollout:
    """Base of the per-environment classes ``OrsSpec.environment_factory`` builds.

    ``env``: the ``OrsEnv``; ``reward``: the episode's return so far (the sum
    of its step rewards, the terminal tool's grade included once graded);
    ``rewards``: each step's reward; ``finished``: the episode has ended.
    """

    _env_id: str = ""
    _split: str | None = None
    _env_kwargs: Mapping[str, Any] = {}
    _multimodal: bool = False
    _terminal: TerminalToolSpec | None = None

    def __init__(self) -> None:
        self._env: OrsEnv | None = None
        self._made: gym.Env[Any, Any] | None = None
        self._rewards: list[float] = []
        self._finished = False
        self._started = False

    # -- TRL's contract ---------------------------------------------------------------
    def reset(self, task_index: int | None = None, **row: Any) -> str | list[dict[str, Any]]:
        """Start a session on task ``task_index`` (deleting the previous one); return its prompt.

        A ``task_spec`` column starts that task instead; ``split`` overrides the spec's.
        """
        env = self._open()
        options: dict[str, Any] = {}
        if row.get("task_spec") is not None:
            options["task_spec"] = dict(row["task_spec"])
        elif task_index is not None:
            options["index"] = int(task_index)
        split = row.get("split") or self._split
        if split is not None:
            options["split"] = str(split)
        observation, _ = env.reset(options=options)
        self._rewards = []
        self._finished = False
        self._started = True
        return self._content(observation)

    # -- state -----------------------------------------------------------------------
    @property
    def env(self) -> OrsEnv | None:
        """The ``OrsEnv`` this instance drives (None before the first reset)."""
        return self._env

    @property
    def reward(self) -> float:
        return float(sum(self._rewards))

    @property
    def rewards(self) -> list[float]:
        return list(self._rewards)

    @property
    def finished(self) -> bool:
        return self._finished

    # -- internals -------------------------------------------------------------------
    def _open(self) -> OrsEnv:
        if self._env is None:
            self._made = gym.make(self._env_id, **dict(self._env_kwargs))
            env = self._made.unwrapped
            if not isinstance(env, OrsEnv):
                raise TypeError(f"{self._env_id!r} is not an ORS environment (got {env!r})")
            self._env = env
        return self._env

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str | list[dict[str, Any]]:
        if not self._started or self._env is None:
            raise RuntimeError(f"tool {name!r} was called before reset(); call reset() first")
        if self._finished:
            return ENDED_TEXT
        return self._step({"tool_calls": [{"name": name, "arguments": arguments}]})

    def _step(self, action: Any) -> str | list[dict[str, Any]]:
        assert self._env is not None
        observation, reward, terminated, truncated, _ = self._env.step(action)
        self._rewards.append(float(reward))
        self._finished = bool(terminated or truncated)
        return self._content(observation)

    def _grade(self, completion: Any) -> float:
        """The terminal-tool rule: an unfinished episode's final reply goes to the terminal tool."""
        if self._started and not self._finished and self._terminal is not None:
            reply = _final_reply(completion)
            if reply is not None:
                self._step({"message": reply})
        return self.reward

    def _content(self, observation: Mapping[str, Any]) -> str | list[dict[str, Any]]:
        """Text, or TRL's content parts with the images for a multimodal model."""
        text = str(observation["text"])
        images: Sequence[np.ndarray] = observation["images"]
        if not images:
            return text
        if not self._multimodal:
            note = f"[{len(images)} image(s) not shown: this model reads text only]"
            return f"{text}\n{note}" if text else note
        from PIL import Image

        parts: list[dict[str, Any]] = [
            {"type": "image", "image": Image.fromarray(image)} for image in images
        ]
        if text:
            parts.append({"type": "text", "text": text})
        return parts


def _final_reply(completion: Any) -> str | None:
    """The text of a completion's last message when the model wrote it, else None."""
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, Sequence) or not completion:
        return None
    last = completion[-1]
    if not isinstance(last, Mapping) or last.get("role") != "assistant":
        return None
    content = last.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping)
            and p.get("type") == "text"
        )
    return ""


def rollout_class(
    env_id: str,
    tools: Sequence[ToolSpec],
    terminal: TerminalToolSpec | None,
    env_kwargs: Mapping[str, Any],
    multimodal: bool,
    split: str | None = None,
) -> type[OrsRollout]:
    """A subclass of ``OrsRollout`` with one method per visible tool of ``env_id``."""
    namespace: dict[str, Any] = {
        "_env_id": env_id,
        "_split": split,
        "_env_kwargs": dict(env_kwargs),
        "_multimodal": multimodal,
        "_terminal": terminal,
    }
    taken = set(_RESERVED)
    for spec in tools:
        function = tool_function(spec.name, spec.description, spec.input_schema, _dispatch)
        if function is None:
            continue
        attribute = attribute_name(spec.name, taken)
        taken.add(attribute)
        namespace[attribute] = function
    class_name = "Ors_" + "".join(c if c.isalnum() else "_" for c in env_id)
    return type(class_name, (OrsRollout,), namespace)


def _dispatch(self: OrsRollout, name: str, arguments: dict[str, Any]) -> Any:
    return self._call_tool(name, arguments)


