"""One TRL rollout over one ORS session: ``reset`` plus the environment's tools.

TRL builds instances once (``environment_factory``), then calls ``reset(**row)``
for each rollout and the instance's public functions as the model's tools,
and ``get_reward`` once the rollout has ended. Everything else on the class is
private or a property, so that TRL offers nothing else to the model. A session
lives from ``reset`` to ``get_reward``, which gives it back; TRL pools
instances, and a pooled one holds none. One dropped mid-episode (or alive at
exit) has its session deleted by the wrapped ``OrsEnv``'s finaliser.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from ors_gym.env import OrsEnv
from ors_gym.protocol import TerminalToolSpec
from ors_gym.reward_parts import add_parts, step_parts

logger = logging.getLogger("ors_gym")

__all__ = ["ENDED_TEXT", "OrsRollout"]

#: What a tool call answers once the episode has finished.
ENDED_TEXT = "The episode has ended: this tool call was not run. Reply without calling a tool."
_warned_unseen_reply = False


class OrsRollout:
    """Base of the per-environment classes ``OrsSpec.environment_factory`` builds.

    ``env``: the ``OrsEnv``; ``reward``: the episode's return so far (the sum
    of its step rewards, the terminal tool's grade included once graded);
    ``rewards``: each step's reward; ``finished``: the episode has ended;
    ``reward_parts``: the named parts the environment returned
    (``ToolOutput.metadata["reward_parts"]``), summed per name over the episode.
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
        self._parts: dict[str, float] = {}
        self._finished = False
        self._started = False
        self._graded = False  # the final reply went to the terminal tool (or there was none)
        self._reported = False  # a reward function returned this episode's return
        self._counted = False  # get_reward returned it
        self._lock = threading.Lock()

    # -- TRL's contract ---------------------------------------------------------------
    def reset(self, task_index: int | None = None, **row: Any) -> str | list[dict[str, Any]]:
        """Start a fresh episode on a fresh session for task ``task_index``; return its prompt.

        A ``task_spec`` column starts that task instead; ``split`` overrides the spec's.
        A session the previous episode still held is deleted first.
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
        self._rewards, self._parts = [], {}
        self._finished = self._graded = self._reported = self._counted = False
        self._started = False
        observation, _ = env.reset(options=options)
        self._started = True
        return self._content(observation)

    async def get_reward(self) -> float | None:
        """The episode's return, then its session given back (TRL calls this once a rollout ends).

        An unfinished episode is graded by the terminal tool first: with its final
        reply when a reward function handed it over (``ors_reward`` does, under
        ``GRPOTrainer``), or at once when that tool takes no input (it grades
        from the environment's state). None when a reward function already returned this
        return (so that TRL does not count it twice), or before any ``reset``.
        """
        return await asyncio.to_thread(self._settle)

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

    @property
    def reward_parts(self) -> dict[str, float]:
        return dict(self._parts)

    # -- internals -------------------------------------------------------------------
    def _open(self) -> OrsEnv:
        if self._env is None:
            self._made = gym.make(self._env_id, **dict(self._env_kwargs))
            env = self._made.unwrapped
            if not isinstance(env, OrsEnv):
                raise TypeError(f"{self._env_id!r} is not an ORS environment (got {env!r})")
            self._env = env
        return self._env

    def _call_tool(
        self, name: str, arguments: dict[str, Any], reply: str | None = None
    ) -> str | list[dict[str, Any]]:
        if not self._started or self._env is None:
            raise RuntimeError(f"tool {name!r} was called before reset(); call reset() first")
        if self._finished:
            return ENDED_TEXT
        if reply is not None:  # the terminal tool, offered as a tool
            self._graded = True
            return self._step({"message": reply})
        return self._step({"tool_calls": [{"name": name, "arguments": arguments}]})

    def _step(self, action: Any) -> str | list[dict[str, Any]]:
        assert self._env is not None
        observation, reward, terminated, truncated, info = self._env.step(action)
        self._rewards.append(float(reward))
        add_parts(self._parts, step_parts(info))
        self._finished = bool(terminated or truncated)
        return self._content(observation)

    def _grade(self, completion: Any, *, report: bool = True) -> float | None:
        """The terminal-tool rule: an unfinished episode's final reply goes to the terminal tool.

        Graded once; ``report`` marks the return as counted by the caller (then
        ``get_reward`` gives None). None when the session was already given back
        before a reply could be graded.
        """
        with self._lock:
            if not self._started or self._counted:
                return None  # get_reward has already given this return
            if not self._graded:
                self._graded = True
                if not self._finished and self._terminal is not None:
                    reply = _final_reply(completion)
                    if reply is not None and self._env is not None:
                        self._step({"message": reply})
            self._reported = self._reported or report
            return self.reward

    def _settle(self) -> float | None:
        """``get_reward``'s work: grade what can be, give the session back, say the return.

        A terminal call that fails is logged (WARNING) and scores None: TRL then
        leaves the rollout out of its group's advantages.
        """
        with self._lock:
            if not self._started or self._counted:
                return None
            failed = False
            try:
                if not self._graded and not self._finished and self._terminal is not None:
                    if self._terminal.arg is None:  # it grades from state: the text is unused
                        self._step({"message": ""})
                    else:
                        _warn_unseen_reply(self._env_id, self._terminal.name)
            except Exception as exc:  # the environment failed: no return to give
                failed = True
                logger.warning("ors_gym.trl: grading %s's episode failed: %s", self._env_id, exc)
            finally:
                self._graded = True
                self._release()
            self._counted = not self._reported and not failed
            return self.reward if self._counted else None

    def _release(self) -> None:
        """Give the session back now (the backend stays, for the next ``reset``)."""
        env = self._env
        if env is not None and env.session_id is not None:
            env._run(env._core.end_session())

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


def _warn_unseen_reply(env_id: str, terminal: str) -> None:
    global _warned_unseen_reply
    if _warned_unseen_reply:
        return
    _warned_unseen_reply = True
    logger.warning(
        "ors_gym.trl: %s ended unfinished and no reward function handed its final reply to "
        "the terminal tool %r (AsyncGRPOTrainer's loop shows the environment no reply): it "
        "scores its return so far. Pass OrsSpec(..., terminal_as_tool=True) to offer %r to "
        "the model as a tool", env_id, terminal, terminal)


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
