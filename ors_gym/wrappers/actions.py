"""``DiscreteToolActions``: a ``Discrete`` action space over a finite set of tool calls.

Stable-Baselines3 (and most RL libraries) want a fixed, numbered action set;
an ORS environment acts through tool calls with JSON arguments. Where every
argument of a tool has finitely many values, the calls can be enumerated and
numbered once, at construction.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ors_gym.protocol import ToolSpec
from ors_gym.schema import finite_choices, json_equal

__all__ = [
    "DEFAULT_MAX_ACTIONS",
    "DiscreteToolActions",
    "NotEnumerableError",
    "enumerate_tool_calls",
]

logger = logging.getLogger("ors_gym")

#: Above this many enumerated calls, construction fails (pass ``calls=`` or ``max_actions=``).
DEFAULT_MAX_ACTIONS = 4096

class NotEnumerableError(ValueError):
    """The tools' calls cannot be listed; ``reason`` says why in one clause (no advice)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


_OMIT = object()  # an optional parameter with no default in its schema, left out of the call


def _tool_calls(
    spec: ToolSpec, *, max_int_range: int, max_actions: int
) -> tuple[list[dict[str, Any]] | None, str, str]:
    """``(calls, "", "")``: every call of ``spec``; or ``(None, why, detail)`` when it
    has too many (``detail``: the offending parameter's schema, or "").

    A required parameter contributes its finite values. An optional one
    contributes its values too, plus "omitted" unless its schema gives a
    ``default`` among those values (then omitting it is the same call as
    sending the default, and listing both would weigh that call twice). An
    optional parameter with infinitely many values is always omitted; a
    required one makes the tool non-enumerable.
    """
    schema = spec.input_schema or {}
    properties = schema.get("properties") or {}
    if not isinstance(properties, Mapping):
        return None, "its input schema's 'properties' is not an object", repr(properties)[:200]
    required = set(schema.get("required") or [])
    names: list[str] = []
    options: list[list[Any]] = []
    for name, param_schema in properties.items():
        choices = finite_choices(param_schema, schema, max_int_range=max_int_range)
        if name in required:
            if choices is None:
                why = f"required parameter {name!r} has no finite set of values"
                return None, why, f"schema {json.dumps(param_schema, sort_keys=True)[:200]}"
            if not choices:
                return None, f"required parameter {name!r} admits no value", ""
            options.append(list(choices))
        elif choices is None:
            logger.debug("tool %r: optional parameter %r is infinite: omitted", spec.name, name)
            continue
        elif _default_listed(param_schema, choices):
            options.append(list(choices))
        else:
            options.append([*choices, _OMIT])
        names.append(name)
    count = int(np.prod([len(o) for o in options], dtype=np.int64)) if options else 1
    if count > max_actions:
        why = f"its finite parameters combine into {count} calls, more than max_actions="
        return None, f"{why}{max_actions}", ""
    calls = [
        {
            "name": spec.name,
            "arguments": {n: v for n, v in zip(names, combo, strict=True) if v is not _OMIT},
        }
        for combo in itertools.product(*options)
    ]
    return calls, "", ""


def _default_listed(param_schema: Any, choices: Sequence[Any]) -> bool:
    """True when the parameter's schema has a ``default`` that is one of ``choices``."""
    if not isinstance(param_schema, Mapping) or "default" not in param_schema:
        return False
    return any(json_equal(param_schema["default"], c) for c in choices)


def enumerate_tool_calls(
    tools: Sequence[ToolSpec],
    *,
    max_int_range: int = 16,
    skip_infinite: bool = False,
    max_actions: int = DEFAULT_MAX_ACTIONS,
) -> list[dict[str, Any]]:
    """All calls of ``tools`` (in order) whose arguments take finitely many values.

    Within a tool, calls are the Cartesian product of its parameters' values in
    schema order, the first parameter varying slowest; an optional parameter's
    "omitted" (listed only when its schema gives no default among its values)
    comes after its values. A tool with a required parameter of
    infinitely many values raises :class:`NotEnumerableError` (a ``ValueError``)
    naming tool and parameter, or is skipped (with a warning) when
    ``skip_infinite`` is true.
    """
    calls: list[dict[str, Any]] = []
    skipped: list[str] = []
    for spec in tools:
        tool_calls, why, detail = _tool_calls(
            spec, max_int_range=max_int_range, max_actions=max_actions
        )
        if tool_calls is None:
            if not skip_infinite:
                raise NotEnumerableError(
                    f"cannot enumerate the calls of tool {spec.name!r}: {why}"
                    f"{f' ({detail})' if detail else ''}. Give the calls yourself with "
                    "DiscreteToolActions(env, calls=[{'name': ..., 'arguments': {...}}, ...]), "
                    "choose enumerable tools with tools=[...], or pass skip_infinite=True to "
                    "leave such tools out",
                    reason=f"tool {spec.name!r}: {why}",
                )
            logger.warning("DiscreteToolActions: skipping tool %r: %s", spec.name, why)
            skipped.append(spec.name)
            continue
        calls.extend(tool_calls)
        if len(calls) > max_actions:
            raise NotEnumerableError(
                f"the tools' calls number more than max_actions={max_actions}; raise max_actions, "
                "choose fewer tools with tools=[...], or give the calls yourself with calls=[...]",
                reason=f"its tools' calls number more than {max_actions}",
            )
    if not calls:
        listed = [t.name for t in tools]
        raise NotEnumerableError(
            f"no tool call could be enumerated (tools {listed}, skipped {skipped}); "
            "give the calls yourself with calls=[{'name': ..., 'arguments': {...}}, ...]",
            reason=f"no tool call could be enumerated (listed tools: {listed or 'none'})",
        )
    return calls


def _check_calls(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Validate a user-given call list into ``{"name": str, "arguments": dict}`` dicts."""
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
        raise TypeError(
            "calls must be a list of {'name': ..., 'arguments': {...}} dicts, "
            f"got {type(calls).__name__}"
        )
    checked: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise ValueError(
                f"calls[{i}] must be a dict with a str 'name' and an 'arguments' dict, got {call!r}"
            )
        extra = set(call) - {"name", "arguments"}
        if extra:
            raise ValueError(
                f"calls[{i}] has unknown key(s) {sorted(extra)}; a call has 'name' and 'arguments'"
            )
        arguments = call.get("arguments", {})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise ValueError(f"calls[{i}]['arguments'] must be a dict, got {arguments!r}")
        checked.append({"name": call["name"], "arguments": copy.deepcopy(dict(arguments))})
    if not checked:
        raise ValueError("calls is empty; give at least one {'name': ..., 'arguments': {...}}")
    keys = [json.dumps(c, sort_keys=True, default=str) for c in checked]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"calls lists the same call more than once: {duplicates}")
    return checked


def _listed_tools(env: gym.Env[Any, Any]) -> list[ToolSpec]:
    tools = getattr(env.unwrapped, "tools", None)
    listed = getattr(tools, "tools", None)
    if listed is None:
        raise TypeError(
            f"DiscreteToolActions needs an ORS environment (OrsEnv) to enumerate tools, got "
            f"{env.unwrapped!r}; for another env give the calls with calls=[...]"
        )
    return list(listed)


class DiscreteToolActions(gym.ActionWrapper[Any, np.int64, Any]):
    """Number a finite set of tool calls: action ``i`` runs ``self.calls[i]``.

    The calls are either given (``calls=[{"name": ..., "arguments": {...}}, ...]``,
    used as is, in order) or enumerated from the environment's listed tools
    (``env.tools`` at construction, i.e. the shared tools; task-specific tools
    appear only after reset and must be given with ``calls=``). ``tools=[...]``
    restricts the enumeration to the named tools, in that order. Per tool, each
    parameter contributes its finite values (``enum``/``const``/``Literal``,
    booleans, integer ranges of at most ``max_int_range`` values, ``anyOf``
    with ``null``), and an optional parameter without a listed ``default``
    also contributes "omitted" (with one, omitting it would repeat the default's
    call); optional parameters with infinitely many values are always omitted. A tool
    with a required infinite parameter raises ``ValueError`` naming it, unless
    ``skip_infinite=True`` (then it is left out with a warning naming it). The
    terminal tool is not enumerated (a warning names it): add it through ``calls=``
    if the agent should call it.

    Each step sends ``{"tool_calls": [call], "message": ""}`` to the wrapped env.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        calls: Sequence[Mapping[str, Any]] | None = None,
        max_int_range: int = 16,
        *,
        tools: Sequence[str] | None = None,
        skip_infinite: bool = False,
        max_actions: int = DEFAULT_MAX_ACTIONS,
    ) -> None:
        super().__init__(env)
        if calls is not None:
            if tools is not None:
                raise ValueError("give either calls=[...] or tools=[...], not both")
            # Not checked against the listed tools: task tools and the terminal tool are unlisted.
            self.calls = _check_calls(calls)
        else:
            listed = _listed_tools(env)
            if tools is not None:
                by_name = {t.name: t for t in listed}
                missing = [n for n in tools if n not in by_name]
                if missing:
                    raise ValueError(
                        f"tools={list(tools)}: {missing} not among the environment's tools "
                        f"{sorted(by_name)}"
                    )
                listed = [by_name[n] for n in tools]
            self.calls = enumerate_tool_calls(
                listed,
                max_int_range=max_int_range,
                skip_infinite=skip_infinite,
                max_actions=max_actions,
            )
            _warn_left_out_terminal(env)
        self.action_space = spaces.Discrete(len(self.calls))

    def action(self, action: Any) -> dict[str, Any]:
        """The dict action for index ``action``: one tool call, no message."""
        try:
            index = int(np.asarray(action).item())
        except (TypeError, ValueError):
            raise ValueError(
                f"action must be an integer in [0, {len(self.calls)}), got {action!r}"
            ) from None
        if not 0 <= index < len(self.calls):
            raise ValueError(f"action {index} is out of range: choose from [0, {len(self.calls)})")
        return {"tool_calls": [copy.deepcopy(self.calls[index])], "message": ""}

    def action_meanings(self) -> list[str]:
        """One readable name per action, e.g. ``move(direction="up")``."""
        return [_describe(call) for call in self.calls]


def _warn_left_out_terminal(env: gym.Env[Any, Any]) -> None:
    """Warn that the environment's terminal tool is not among the enumerated calls: without
    it an agent may have no action that ends the episode."""
    space = getattr(env.unwrapped, "action_space", None)
    terminal = getattr(space, "terminal_tool", None)
    if terminal is None:
        return
    key = (getattr(env.unwrapped, "env_name", None), terminal.name)
    if key in _WARNED:
        return
    _WARNED.add(key)
    what = f"its argument {terminal.arg!r} is free text" if terminal.arg else "it is hidden"
    logger.warning(
        "DiscreteToolActions: the terminal tool %r is not among the actions (%s), so an "
        "agent cannot end an episode through it; add its calls with calls=[...]",
        terminal.name, what,
    )


#: (environment, terminal tool) pairs already warned about: once per process is enough.
_WARNED: set[tuple[str | None, str]] = set()


def _describe(call: Mapping[str, Any]) -> str:
    args = ", ".join(
        f"{k}={json.dumps(v, default=str)}" for k, v in dict(call["arguments"]).items()
    )
    return f"{call['name']}({args})"
