"""The per-environment rollout classes, and how they cross into another process.

TRL offers the model every public function of an environment's class, so each
environment id gets a class of its own (``Ors_ors_QA_v0``) with one method per
visible tool. Such a class is made at run time, so pickle cannot find it by
name; TRL's ``AsyncRolloutWorker`` pickles its ``environment_factory`` into a
spawned process. The classes' metaclass is therefore pickled by value: what
``rollout_class`` was given, plus the id's Gymnasium registration, so an id
registered in the parent (``register_server``, ``register_class``) resolves in
the child too. Rebuilding from equal state gives the same class in a process,
as TRL's reward columns compare environments' classes by identity.
"""

from __future__ import annotations

import copyreg
import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from pydantic import BaseModel

from ors_gym.protocol import TerminalToolSpec, ToolSpec
from ors_gym.secret import Secret
from ors_gym.trl._rollout import OrsRollout
from ors_gym.trl._tools import attribute_name, tool_function

logger = logging.getLogger("ors_gym")

__all__ = ["rollout_class"]

_RESERVED = frozenset({"reset", "get_reward", "env", "reward", "rewards", "finished",
                       "reward_parts"})
_made: dict[str, type[OrsRollout]] = {}
_lock = threading.Lock()


class _RolloutType(type):
    """Metaclass of the generated classes: carries the state they were made from."""

    _ors_state: dict[str, Any]


def rollout_class(
    env_id: str,
    tools: Sequence[ToolSpec],
    terminal: TerminalToolSpec | None,
    env_kwargs: Mapping[str, Any],
    multimodal: bool,
    split: str | None = None,
    *,
    terminal_as_tool: bool = False,
) -> type[OrsRollout]:
    """A subclass of ``OrsRollout`` with one method per visible tool of ``env_id``.

    The terminal tool is a method only with ``terminal_as_tool`` (else the final
    reply goes to it). The same arguments give the same class in one process.
    """
    state = {
        "env_id": env_id,
        "tools": list(tools),
        "terminal": terminal,
        "env_kwargs": dict(env_kwargs),
        "multimodal": bool(multimodal),
        "split": split,
        "terminal_as_tool": bool(terminal_as_tool),
        "registration": _registration(env_id),
    }
    return _build(state)


def _registration(env_id: str) -> dict[str, Any] | None:
    spec = gym.registry.get(env_id)
    if spec is None:
        return None
    return {
        "id": spec.id,
        "entry_point": spec.entry_point,
        "vector_entry_point": spec.vector_entry_point,
        "max_episode_steps": spec.max_episode_steps,
        "kwargs": dict(spec.kwargs),
        "disable_env_checker": spec.disable_env_checker,
    }


def _key(state: Mapping[str, Any]) -> str:
    """Equal for equal state, compared by value: two secrets never share a class (their
    reprs are redacted, so they are hashed revealed; the key itself is never shown)."""
    blob = json.dumps({k: v for k, v in state.items() if k != "registration"},
                      sort_keys=True, default=_canonical)
    return hashlib.sha256(blob.encode()).hexdigest()


def _canonical(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Secret):
        return {"secret": value.reveal()}
    if isinstance(value, type):
        return f"{value.__module__}:{value.__qualname__}:{id(value)}"
    return repr(value)


def _build(state: dict[str, Any]) -> type[OrsRollout]:
    key = _key(state)
    with _lock:
        made = _made.get(key)
        if made is not None:
            return made
        registration = state.get("registration")
        if registration is not None and registration["id"] not in gym.registry:
            gym.register(**registration)  # registered in the process that pickled the class
        env_id: str = state["env_id"]
        terminal: TerminalToolSpec | None = state["terminal"]
        namespace: dict[str, Any] = {
            "_env_id": env_id,
            "_split": state["split"],
            "_env_kwargs": dict(state["env_kwargs"]),
            "_multimodal": state["multimodal"],
            "_terminal": None if state["terminal_as_tool"] else terminal,
        }
        taken = set(_RESERVED)
        calls: list[tuple[ToolSpec, Any]] = [(spec, _dispatch) for spec in state["tools"]]
        if state["terminal_as_tool"] and terminal is not None:
            calls.append((_terminal_spec(terminal), _answer))
        for spec, call in calls:
            function = tool_function(spec.name, spec.description, spec.input_schema, call)
            if function is None:
                continue
            attribute = attribute_name(spec.name, taken)
            taken.add(attribute)
            namespace[attribute] = function
        name = "Ors_" + "".join(c if c.isalnum() else "_" for c in env_id)
        made_type = _RolloutType(name, (OrsRollout,), namespace)
        made_type._ors_state = state
        cls: type[OrsRollout] = made_type  # type: ignore[assignment]
        _made[key] = cls
        return cls


def _rebuild(state: dict[str, Any]) -> type[OrsRollout]:
    return _build(state)


def _reduce(cls: _RolloutType) -> tuple[Any, ...]:
    return _rebuild, (cls._ors_state,)


copyreg.pickle(_RolloutType, _reduce)


def _terminal_spec(terminal: TerminalToolSpec) -> ToolSpec:
    """The hidden terminal tool as a tool the model calls, its one input a string."""
    properties = {} if terminal.arg is None else {
        terminal.arg: {"type": "string", "description": "Your final answer."}}
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return ToolSpec(name=terminal.name, description=terminal.description, input_schema=schema)


def _dispatch(self: OrsRollout, name: str, arguments: dict[str, Any]) -> Any:
    return self._call_tool(name, arguments)


def _answer(self: OrsRollout, name: str, arguments: dict[str, Any]) -> Any:
    """A call of the terminal tool: its input goes to the environment as the final reply."""
    return self._call_tool(name, arguments, reply=str(next(iter(arguments.values()), "")))
