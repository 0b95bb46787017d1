"""Record episodes as JSON lines, one finished episode per line, crash-safe.

``RecordTrajectories(env, path)`` appends each episode to ``path`` when it
ends (terminated or truncated), flushed and fsync'd, so a run killed at any
point keeps every episode it finished. An episode cut short by ``close()`` or
by a ``reset()`` before its end is written too, with ``"complete": false``
(unless it has no step yet: a reset made only to score a group writes nothing).
``read_trajectories(path)`` reads them back, skipping (with a warning) a last
line an interrupted write left truncated.

A line holds: the env id and name, task spec, split and index, the prompt
(text, and its blocks), the session's tools, and per step the action as given
(made JSON-safe), the assistant text, parsed tool calls with ids, each call's
result (text blocks, images as ``{"mime", "shape"}`` summaries or optionally
base64), rewards, ``terminated``/``truncated`` and their reasons. Nothing else
is written: no API key or secret reaches a trajectory (they travel only in
request headers). The format itself, its reader and ``Episode`` live in
:mod:`ors_gym.trajectories`; this module only records.

With ``upload=`` (an ``ors_gym.platform.RolloutUploader``) each written episode is
also handed to the uploader, which sends it to the platform's rollout log from
its own thread: the step that ends the episode does not wait for the network.
"""

from __future__ import annotations

import json
import logging
import os
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsFloat

import gymnasium as gym

from ors_gym import trajectories as _records
from ors_gym._json import plain
from ors_gym.actions import ToolCall
from ors_gym.errors import OrsActionError, redact_url
from ors_gym.formats import AssistantTurn, assistant_turn, call_id, step_exchange

if TYPE_CHECKING:
    from ors_gym.platform import RolloutUploader

__all__ = ["RecordTrajectories"]

logger = logging.getLogger("ors_gym")


class RecordTrajectories(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Append each episode of ``env`` to the JSON-lines file ``path``.

    ``images``: ``"summary"`` (``{"mime", "shape"}``, no pixels) or
    ``"base64"`` (the image data too, so a trajectory can be replayed to a
    model or scored with its images). Works over ``OrsEnv`` directly or over
    wrappers that keep its ``info`` (``Conversation``, ``DiscreteToolActions``).
    Several recorders may append to one file: each line is one ``write``.
    ``upload``: a ``RolloutUploader`` (shared by any number of recorders) that also
    sends each written episode to the platform's rollout log, in the background.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        path: str | os.PathLike[str],
        *,
        images: _records.ImageMode = "summary",
        upload: RolloutUploader | None = None,
    ) -> None:
        if images not in ("summary", "base64"):
            raise ValueError(f"images={images!r}; choose 'summary' or 'base64'")
        gym.utils.RecordConstructorArgs.__init__(self, path=str(path), images=images)
        super().__init__(env)
        self.path = Path(path)
        self.images: _records.ImageMode = images
        self.upload = upload
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._finalizer = weakref.finalize(self, os.close, self._fd)
        self._end_torn_line()
        self._episode: dict[str, Any] | None = None
        self._episodes = 0

    @property
    def episodes_written(self) -> int:
        """How many episodes this recorder has written."""
        return self._episodes

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._episode is not None and self._episode["steps"]:
            self._write(complete=False, ended_by="reset")
        observation, info = self.env.reset(seed=seed, options=options)
        ors = self.env.unwrapped
        self._episode = _records.episode_header(
            info,
            env_id=getattr(getattr(ors, "spec", None), "id", None),
            server=redact_url(getattr(ors, "location", None)),
            seed=seed,
            images=self.images,
        )
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        episode = self._episode
        if episode is None:  # the env stepped without reset: nothing to attach to
            return observation, reward, terminated, truncated, info
        number = len(episode["steps"]) + 1
        try:
            turn = assistant_turn(action, step=number)
        except OrsActionError:  # an action an inner wrapper translated (a Discrete index...)
            turn = _turn_from_calls(info, number)
        exchange = step_exchange(turn, info)
        text = _observation_text(observation) or _observation_text(info.get("observation"))
        episode["steps"].append(_records.step_record(
            action, exchange, (observation, reward, terminated, truncated, info),
            number=number, observation_text=text, images=self.images,
        ))
        if terminated or truncated:
            self._write(complete=True, ended_by="terminated" if terminated else "truncated")
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        """Write an unfinished episode (``"complete": false``), close the file, then the env."""
        try:
            if self._episode is not None and self._episode["steps"] and self._fd is not None:
                self._write(complete=False, ended_by="close")
            self._episode = None
        finally:
            if self._finalizer.detach() is not None and self._fd is not None:
                os.close(self._fd)
            self._fd = None
            super().close()

    # -- records -------------------------------------------------------------------------
    def _write(self, *, complete: bool, ended_by: str) -> None:
        episode, self._episode = self._episode, None
        if episode is None or self._fd is None:
            return
        steps = episode["steps"]
        last = steps[-1] if steps else {}
        episode.update(
            episode=self._episodes,
            length=len(steps),
            total_reward=float(sum(s["reward"] for s in steps)),
            terminated=bool(last.get("terminated", False)),
            truncated=bool(last.get("truncated", False)),
            complete=complete,
            ended_by=ended_by,
            ended_at=time.time(),
        )
        line = (json.dumps(episode, ensure_ascii=False, default=plain) + "\n").encode()
        view = memoryview(line)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fsync(self._fd)
        self._episodes += 1
        if self.upload is not None:
            settings = getattr(self.env.unwrapped, "settings", None)
            self.upload.submit(episode, environment=getattr(settings, "deployment", None),
                               variant=getattr(settings, "variant", None))

    def _end_torn_line(self) -> None:
        """Start on a fresh line if an interrupted run left a partial one at the end."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                logger.warning(
                    "%s ends with a partial line (an interrupted write); appending after it",
                    self.path,
                )
                os.write(self._fd, b"\n")


def _turn_from_calls(info: Mapping[str, Any], step: int) -> AssistantTurn:
    """The turn an inner wrapper made: the calls ``info`` says ran, with their ids."""
    calls = tuple(
        ToolCall(str(c.get("name")), dict(c.get("input") or {}), c.get("id") or call_id(step, i))
        for i, c in enumerate(info.get("calls") or ())
    )
    return AssistantTurn(calls, "")


def _observation_text(observation: Any) -> str | None:
    if isinstance(observation, Mapping) and isinstance(observation.get("text"), str):
        return str(observation["text"])
    return None
