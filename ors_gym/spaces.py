"""Gymnasium spaces for ORS actions and observations.

``AnyText`` and ``AnyImage`` are the leaf spaces: text that is any Python
``str`` (model output is full Unicode), and an image that is any HxWx3
``uint8`` array. ``ToolCallSpace`` is the action space of an ORS environment:
a message or a set of tool calls, sampled from the tools' JSON Schemas.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from ors_gym.actions import parse_action
from ors_gym.errors import OrsActionError
from ors_gym.protocol import TerminalToolSpec, ToolSpec
from ors_gym.schema import SchemaError, compile_sampler

__all__ = ["AnyImage", "AnyText", "ToolCallSpace"]

logger = logging.getLogger("ors_gym")


class AnyText(spaces.Text):
    """A ``Text`` space whose ``contains`` accepts any ``str`` up to ``max_length``.

    Gymnasium's ``Text`` checks every character against a charset; a full
    Unicode charset takes seconds and hundreds of MB to build, so this keeps
    the small default charset for ``sample()`` and skips it in ``contains``.
    """

    def __init__(self, max_length: int = 1_000_000, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length=max_length, min_length=min_length, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AnyText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    def __repr__(self) -> str:
        return f"AnyText(max_length={self.max_length})"


class AnyImage(spaces.Space[NDArray[np.uint8]]):
    """Any ``uint8`` array of shape (H, W, 3): an RGB image of unknown size."""

    def __init__(self, max_side: int = 64, seed: Any = None) -> None:
        super().__init__(shape=None, dtype=np.uint8, seed=seed)
        self.max_side = max_side

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> NDArray[np.uint8]:
        h, w = (int(v) for v in self.np_random.integers(1, self.max_side + 1, size=2))
        return self.np_random.integers(0, 256, size=(h, w, 3), dtype=np.uint8)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, np.ndarray)
            and x.dtype == np.uint8
            and x.ndim == 3
            and x.shape[2] == 3
            and x.shape[0] > 0
            and x.shape[1] > 0
        )

    def to_jsonable(self, sample_n: Any) -> list[Any]:
        return [np.asarray(x).tolist() for x in sample_n]

    def from_jsonable(self, sample_n: list[Any]) -> list[NDArray[np.uint8]]:
        return [np.asarray(x, dtype=np.uint8) for x in sample_n]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyImage)

    def __repr__(self) -> str:
        return "AnyImage(H, W, 3, uint8)"


_ArgSampler = Callable[[np.random.Generator], dict[str, Any]]
_CACHE_LIMIT = 256  # compiled samplers kept per space, keyed by schema
_MESSAGE_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 32}


class ToolCallSpace(spaces.Space[Any]):
    """Actions of an ORS env: a str message, or a dict ``{"tool_calls": [...], "message": str}``.

    ``contains`` accepts every action :func:`ors_gym.actions.parse_action`
    accepts whose structured tool calls name a listed tool or the terminal
    tool; any ``str`` is an action (calls written inside text are checked by
    the environment, which shows mistakes to the agent). ``sample`` draws
    between 1 and ``max_calls`` calls of random listed tools with arguments
    drawn from each tool's ``input_schema``, seeded through ``self.np_random``.
    With no listed tools it samples a plain message (which the environment
    routes into the terminal tool).
    """

    def __init__(
        self,
        tools: Sequence[ToolSpec],
        terminal_tool: TerminalToolSpec | None = None,
        *,
        max_calls: int = 1,
        seed: Any = None,
    ) -> None:
        if isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 1:
            raise ValueError(f"max_calls must be an int >= 1, got {max_calls!r}")
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_calls = max_calls
        self._tools: tuple[ToolSpec, ...] = ()
        self._terminal: TerminalToolSpec | None = None
        self._cache: dict[str, _ArgSampler] = {}
        self._samplers: list[_ArgSampler] = []
        self.set_tools(tools, terminal_tool)

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The listed tools ``sample`` draws from."""
        return self._tools

    @property
    def terminal_tool(self) -> TerminalToolSpec | None:
        """The hidden tool a plain message is routed into, if the environment has one."""
        return self._terminal

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def set_tools(
        self, tools: Sequence[ToolSpec], terminal_tool: TerminalToolSpec | None = None
    ) -> None:
        """Replace the tools in place; compiles their schemas. Envs use ``with_tools``
        instead, so that a space already handed out does not change."""
        specs = tuple(_as_tool_spec(t) for t in tools)
        terminal = _as_terminal_spec(terminal_tool)
        if specs == self._tools and terminal == self._terminal and self._samplers:
            return
        self._build(specs, terminal)

    def with_tools(
        self, tools: Sequence[ToolSpec], terminal_tool: TerminalToolSpec | None = None
    ) -> ToolCallSpace:
        """This space if it already has these tools, else a new one with them.

        What an env hands out after ``reset``: a space a user holds (or a vector
        env batched) is never changed afterwards. The new space draws from the
        same random generator and reuses the compiled schemas.
        """
        specs = tuple(_as_tool_spec(t) for t in tools)
        terminal = _as_terminal_spec(terminal_tool)
        if specs == self._tools and terminal == self._terminal and self._samplers:
            return self
        space = ToolCallSpace((), None, max_calls=self.max_calls, seed=self.np_random)
        space._cache = self._cache
        space._build(specs, terminal)
        return space

    def _build(self, specs: tuple[ToolSpec, ...], terminal: TerminalToolSpec | None) -> None:
        self._tools = specs
        self._terminal = terminal
        self._names = tuple(t.name for t in specs)
        self._known = frozenset(self._names) | ({terminal.name} if terminal else set())
        self._samplers = [self._compile(t) for t in specs]
        self._message = compile_sampler(_MESSAGE_SCHEMA)

    def _compile(self, spec: ToolSpec) -> _ArgSampler:
        if spec.input_schema is None:
            return _no_arguments
        key = _schema_key(spec.input_schema)
        sampler = self._cache.get(key)
        if sampler is None:
            sampler = _argument_sampler(spec)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = sampler
        return sampler

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        if not isinstance(x, Mapping | list | tuple):
            return False
        try:
            parsed = parse_action(x)
        except OrsActionError:
            return False
        return all(call.name in self._known for call in parsed.tool_calls)

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        """A random action; ``mask`` (0/1 per tool) or ``probability`` (per tool) may bias it.

        Where the environment has a terminal tool, an unbiased sample is a plain
        message (routed into that tool) as often as a call of any one listed tool
        (one time in ``len(tools) + 1``), so a random agent can end its episodes.
        """
        rng = self.np_random
        weights = self._weights(mask, probability)
        plain = weights is None and self._terminal is not None and (
            int(rng.integers(len(self._names) + 1)) == 0
        )
        if plain or not self._names or (weights is not None and not weights.any()):
            return {"tool_calls": [], "message": self._message(rng)}
        count = 1 if self.max_calls == 1 else int(rng.integers(1, self.max_calls + 1))
        calls = []
        n = len(self._names)
        for _ in range(count):
            i = int(rng.integers(n)) if weights is None else int(rng.choice(n, p=weights))
            calls.append({"name": self._names[i], "arguments": self._samplers[i](rng)})
        return {"tool_calls": calls, "message": ""}

    def _weights(self, mask: Any, probability: Any) -> NDArray[np.float64] | None:
        if mask is not None and probability is not None:
            raise ValueError("pass either mask or probability to sample(), not both")
        given = mask if mask is not None else probability
        if given is None:
            return None
        what = "mask" if mask is not None else "probability"
        arr = np.asarray(given, dtype=np.float64)
        if arr.shape != (len(self._names),):
            raise ValueError(
                f"sample() {what} must have shape ({len(self._names)},), one entry per "
                f"listed tool {list(self._names)}; got shape {arr.shape}"
            )
        if mask is not None:
            if not np.isin(arr, (0.0, 1.0)).all():
                raise ValueError(f"sample() mask must hold only 0 and 1, got {given!r}")
            total = arr.sum()
            return arr / total if total else arr
        if (arr < 0).any() or not np.isclose(arr.sum(), 1.0):
            raise ValueError(
                f"sample() probability must be non-negative and sum to 1, got {given!r}"
            )
        return arr

    def to_jsonable(self, sample_n: Any) -> list[Any]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[Any]) -> list[Any]:
        return list(sample_n)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ToolCallSpace)
            and self.max_calls == other.max_calls
            and [(t.name, t.input_schema) for t in self._tools]
            == [(t.name, t.input_schema) for t in other._tools]
            and _terminal_key(self._terminal) == _terminal_key(other._terminal)
        )

    def __repr__(self) -> str:
        terminal = self._terminal.name if self._terminal else None
        return (
            f"ToolCallSpace(tools={list(self._names)}, terminal_tool={terminal!r}, "
            f"max_calls={self.max_calls})"
        )

    # Compiled samplers are closures: drop them for pickling (AsyncVectorEnv
    # sends spaces to workers) and rebuild them on the other side.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_samplers", "_message", "_cache"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: Any) -> None:
        super().__setstate__(state)
        self._cache = {}
        self._build(self._tools, self._terminal)


def _no_arguments(rng: np.random.Generator) -> dict[str, Any]:
    return {}


def _argument_sampler(spec: ToolSpec) -> _ArgSampler:
    """A sampler of ``spec``'s arguments; ``{}`` (and a warning) if its schema cannot be sampled."""
    schema = spec.input_schema
    try:
        sampler = compile_sampler(schema)
        probe = np.random.default_rng(0)
        for _ in range(3):  # surface unsatisfiable or non-object schemas now, not mid-episode
            if not isinstance(sampler(probe), dict):
                raise SchemaError("its input_schema does not describe an object")
    except (SchemaError, RecursionError) as exc:
        logger.warning(
            "ToolCallSpace: cannot sample arguments for tool %r (%s); sample() will use {}",
            spec.name,
            exc,
        )
        return _no_arguments

    def sample_arguments(rng: np.random.Generator) -> dict[str, Any]:
        value = sampler(rng)
        return value if isinstance(value, dict) else {}

    return sample_arguments


def _schema_key(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, default=repr)


def _terminal_key(spec: TerminalToolSpec | None) -> tuple[str, str | None] | None:
    return None if spec is None else (spec.name, spec.arg)


def _as_tool_spec(tool: Any) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    if isinstance(tool, Mapping):
        return ToolSpec.model_validate(dict(tool))
    raise TypeError(
        f"tools must be ToolSpec objects or dicts like {{'name': ..., 'input_schema': ...}}, "
        f"got {type(tool).__name__}"
    )


def _as_terminal_spec(spec: Any) -> TerminalToolSpec | None:
    if spec is None or isinstance(spec, TerminalToolSpec):
        return spec
    if isinstance(spec, Mapping):
        return TerminalToolSpec.model_validate(dict(spec))
    raise TypeError(
        f"terminal_tool must be a TerminalToolSpec, a dict or None, got {type(spec).__name__}"
    )
