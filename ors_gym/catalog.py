"""``Catalog``: what an environment offers before any session, asked once and cached.

Its name on the server, its shared tools, its splits and tasks. One catalog is
shared by every env over the same environment and backend (``Catalog.shared``),
and concurrent first questions wait for one answer, so a thousand envs
starting at once ask the server once, not a thousand times. Choosing the
task a reset opens lives here too, since it is a question about the tasks.
"""

from __future__ import annotations

import asyncio
import copy
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from ors_gym.backends.base import AsyncBackend
from ors_gym.errors import OrsProtocolError, OrsRequestError
from ors_gym.protocol import ListToolsOutput

__all__ = ["RESET_OPTIONS", "Catalog", "check_reset_options"]

RESET_OPTIONS = frozenset({"task_spec", "index", "split"})


class Catalog:
    """The name, tools, splits and tasks of one environment on one backend (cached)."""

    def __init__(
        self, backend: AsyncBackend, env_name: str | None = None, split: str | None = None
    ) -> None:
        self.backend = backend
        self._name = env_name.lower() if env_name else None
        self._split = split
        self._tools: ListToolsOutput | None = None
        self._num_tasks: dict[str, int] = {}
        self._tasks: dict[str, list[dict[str, Any]] | None] = {}
        # Held while a first answer is fetched, so concurrent first questions wait for it.
        self._lock = asyncio.Lock()

    @classmethod
    def shared(
        cls, backend: AsyncBackend, env_name: str | None = None, split: str | None = None
    ) -> Catalog:
        """The catalog of ``env_name``/``split`` on ``backend``, made once per backend."""
        key = (env_name.lower() if env_name else None, split)
        try:
            per_backend = _SHARED.setdefault(backend, {})
        except TypeError:  # a backend that cannot be weakly referenced: its own catalog
            return cls(backend, env_name, split)
        catalog = per_backend.get(key)
        if catalog is None:
            catalog = per_backend[key] = cls(backend, env_name, split)
        return catalog

    @property
    def location(self) -> str:
        return self.backend.location

    @property
    def known_name(self) -> str | None:
        """The environment's name if known yet (given, or discovered)."""
        return self._name

    @property
    def known_tools(self) -> ListToolsOutput | None:
        """The shared tools if discovered yet."""
        return self._tools

    @property
    def known_split(self) -> str | None:
        return self._split

    async def name(self) -> str:
        """The environment's name on its server (the server's default if not given)."""
        if self._name is None:
            async with self._lock:
                if self._name is None:
                    names = await self.backend.list_environments()
                    if not names:
                        raise OrsProtocolError(
                            "the server lists no environments", server=self.location
                        )
                    self._name = names[0]
        return self._name

    async def tools(self) -> ListToolsOutput:
        """The environment's shared tools and terminal tool (no session needed)."""
        if self._tools is None:
            name = await self.name()
            async with self._lock:
                if self._tools is None:
                    self._tools = await self.backend.tools(name)
        return self._tools

    async def default_split(self) -> str:
        """The split given, else ``train`` where the environment lists it, else its first."""
        if self._split is None:
            name = await self.name()
            async with self._lock:
                if self._split is None:
                    splits = await self.backend.splits(name)
                    if not splits:
                        raise OrsProtocolError(
                            "the environment lists no task splits", server=self.location,
                            env_name=name,
                        )
                    names = [s.name for s in splits]
                    self._split = "train" if "train" in names else names[0]
        return self._split

    async def num_tasks(self, split: str | None = None) -> int:
        split = split or await self.default_split()
        if split not in self._num_tasks:
            name = await self.name()
            async with self._lock:
                if split not in self._num_tasks:
                    self._num_tasks[split] = await self.backend.num_tasks(name, split)
        return self._num_tasks[split]

    async def task(self, index: int, split: str | None = None) -> dict[str, Any]:
        """Task ``index`` of ``split``: from the listed tasks, or ``/task`` for index-only envs."""
        split = split or await self.default_split()
        name = await self.name()
        if split not in self._tasks:
            async with self._lock:
                if split not in self._tasks:
                    try:
                        self._tasks[split] = await self.backend.tasks(name, split)
                    except OrsRequestError:
                        self._tasks[split] = None  # index-only environment: ask per task
        tasks = self._tasks[split]
        if tasks is None:
            return await self.backend.task(name, split, index)
        try:
            return copy.deepcopy(tasks[index])
        except IndexError:
            raise OrsRequestError(
                f"task index {index} is out of range: split {split!r} has {len(tasks)} tasks",
                server=self.location,
                env_name=name,
            ) from None

    async def choose_task(
        self, options: Mapping[str, Any], rng: np.random.Generator
    ) -> tuple[dict[str, Any], str | None, int | None]:
        """The task a reset opens: ``(task_spec, split, index)``.

        ``options["task_spec"]`` is used as given (split and index None); else task
        ``options["index"]`` of ``options["split"]`` (default split), or one drawn
        with ``rng``. The session is then created by split and index, the spec
        being only reported.
        """
        task_spec = options.get("task_spec")
        if task_spec is not None:
            if not isinstance(task_spec, Mapping):
                raise TypeError(
                    f"reset option 'task_spec' must be a dict, got {type(task_spec).__name__}"
                )
            return dict(task_spec), None, None
        split = options.get("split") or await self.default_split()
        if "index" in options:
            index = int(options["index"])
        else:
            count = await self.num_tasks(split)
            if count <= 0:
                raise OrsRequestError(
                    f"split {split!r} has no tasks; choose another with "
                    "reset(options={'split': ...})",
                    server=self.location,
                    env_name=await self.name(),
                )
            index = int(rng.integers(count))
        return await self.task(index, split), split, index


_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple[str | None, str | None], Catalog]] = (
    weakref.WeakKeyDictionary()
)


def check_reset_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` as a dict, or ValueError naming the unknown keys."""
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(
            f"reset options must be a dict such as {{'task_spec': {{...}}}}, "
            f"got {type(options).__name__}"
        )
    options = dict(options or {})
    unknown = set(options) - RESET_OPTIONS
    if unknown:
        raise ValueError(
            f"unknown reset option(s) {sorted(unknown)}; "
            "valid ones are 'task_spec', 'index' and 'split'"
        )
    return options
