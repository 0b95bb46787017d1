"""Group scoring: let an environment compare several attempts at one task.

Some ORS environments (those whose tools list says ``supports_score_group``)
score a *group* of candidate transcripts for one task against each other, as
GRPO-style trainers need. :func:`score_group` sends a group (recorded
trajectories, conversations, or ready candidates) through the environment's
backend in its current session and returns one score per candidate,
index-aligned::

    env = RecordTrajectories(gym.make("ors/Judged-v0"), "runs.jsonl")
    for _ in range(4):                      # four attempts at task 0
        run_episode(env, options={"index": 0})
    env.reset(options={"index": 0})         # a session for the task, to score in
    scores = score_group(env, read_trajectories("runs.jsonl")[-4:])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

import gymnasium as gym

from ors_gym.errors import OrsError, OrsProtocolError, OrsRequestError
from ors_gym.formats import to_ors_messages
from ors_gym.protocol import GroupScore, Message, MessageBlock, TextBlock, ToolResultBlock
from ors_gym.trajectories import trajectory_messages

__all__ = ["ascore_group", "candidate", "score_group"]


@overload
def score_group(
    env: gym.Env[Any, Any],
    group: Sequence[Any],
    *,
    metadata: Sequence[Mapping[str, Any] | None] | None = ...,
    detailed: Literal[False] = ...,
) -> list[float]: ...


@overload
def score_group(
    env: gym.Env[Any, Any],
    group: Sequence[Any],
    *,
    metadata: Sequence[Mapping[str, Any] | None] | None = ...,
    detailed: Literal[True],
) -> list[GroupScore]: ...


def score_group(
    env: gym.Env[Any, Any],
    group: Sequence[Any],
    *,
    metadata: Sequence[Mapping[str, Any] | None] | None = None,
    detailed: bool = False,
) -> list[float] | list[GroupScore]:
    """Score ``group`` (attempts at the task of ``env``'s current session), index-aligned.

    Each member is a recorded trajectory (a :func:`read_trajectories` record),
    a conversation (a list of ORS, OpenAI chat or Anthropic messages), or a
    candidate ``{"messages": [...], "metadata": ...}``. ``metadata`` (one per
    member) is echoed back in the scores. Returns the rewards, or the
    :class:`~ors_gym.protocol.GroupScore` objects with ``detailed=True``.
    ``env`` is an ``OrsEnv`` or any wrapper of one, after ``reset()``.
    Raises :class:`~ors_gym.errors.OrsRequestError` when the environment does
    not support group scoring.
    """
    ors: Any = env.unwrapped
    scorer, name, sid, candidates = _request(ors, group, metadata)
    return _scores(ors, sid, scorer(name, sid, candidates), len(candidates), detailed)


@overload
async def ascore_group(
    env: Any,
    group: Sequence[Any],
    *,
    metadata: Sequence[Mapping[str, Any] | None] | None = ...,
    detailed: Literal[False] = ...,
) -> list[float]: ...


@overload
async def ascore_group(
    env: Any,
    group: Sequence[Any],
    *,
    metadata: Sequence[Mapping[str, Any] | None] | None = ...,
    detailed: Literal[True],
) -> list[GroupScore]: ...


async def ascore_group(
    env: Any,
    group: Sequence[Any],
    *,
    metadata: Sequence[Mapping[str, Any] | None] | None = None,
    detailed: bool = False,
) -> list[float] | list[GroupScore]:
    """:func:`score_group` for an :class:`~ors_gym.AsyncOrsEnv` (after ``await reset()``),
    awaited on its async backend."""
    ors: Any = getattr(env, "unwrapped", env)
    scorer, name, sid, candidates = _request(ors, group, metadata)
    return _scores(ors, sid, await scorer(name, sid, candidates), len(candidates), detailed)


def _request(
    ors: Any, group: Sequence[Any], metadata: Sequence[Mapping[str, Any] | None] | None
) -> tuple[Any, str, str, list[dict[str, Any]]]:
    """The backend's ``score_group``, the env's name, its session and the candidates,
    after checking that ``ors`` can score ``group``."""
    backend = getattr(ors, "backend", None)
    if backend is None or not hasattr(ors, "session_id"):
        raise TypeError(
            f"score_group needs an ORS environment (OrsEnv or a wrapper of one), got {ors!r}"
        )
    if len(group) == 0:
        raise ValueError("score_group needs at least one candidate")
    if metadata is not None and len(metadata) != len(group):
        raise ValueError(
            f"metadata has {len(metadata)} entries for {len(group)} candidates; give one each"
        )
    sid = ors.session_id
    if sid is None:
        raise OrsError(
            "score_group runs in the environment's current session: call env.reset() "
            "(for the task the group attempted) first",
            env_name=getattr(ors, "_env_name", None),
        )
    listed = ors.tools
    if not listed.supports_score_group:
        raise OrsRequestError(
            f"environment {ors.env_name!r} does not support group scoring (its tools list "
            "says supports_score_group=false): only environments that implement "
            "score_group(), such as the bundled Judged, can score a group",
            server=ors.location,
            env_name=ors.env_name,
        )
    scorer = getattr(backend, "score_group", None)
    if scorer is None:
        raise OrsError(
            f"the {type(backend).__name__} backend cannot send group scoring requests",
            env_name=ors.env_name,
        )
    allowed = set(listed.message_block_types)
    candidates = []
    for i, member in enumerate(group):
        built = candidate(member, metadata[i] if metadata is not None else None, index=i)
        built["messages"] = [
            _downgrade(m, allowed).model_dump(mode="json", exclude_none=True)
            for m in built["messages"]
        ]
        candidates.append(built)
    return scorer, ors.env_name, sid, candidates


def _scores(
    ors: Any, sid: str, scores: Sequence[GroupScore], expected: int, detailed: bool
) -> list[float] | list[GroupScore]:
    if len(scores) != expected:
        raise OrsProtocolError(
            f"score_group answered {len(scores)} scores for {expected} candidates",
            server=ors.location,
            env_name=ors.env_name,
            session_id=sid,
        )
    if detailed:
        return list(scores)
    return [float(s.reward) for s in scores]

def candidate(
    member: Any, metadata: Mapping[str, Any] | None = None, *, index: int | None = None
) -> dict[str, Any]:
    """One group member as ``{"messages": [ORS Message], "metadata": {...}}``.

    The metadata is ``metadata`` if given, else the member's own (a
    candidate's ``metadata``; for a trajectory its episode number, return and
    task index), plus ``"candidate": index``.
    """
    own: dict[str, Any] = {}
    if isinstance(member, Mapping) and "steps" in member:
        messages = trajectory_messages(member)
        own = {
            "episode": member.get("episode"),
            "return": member.get("total_reward"),
            "task_index": member.get("index"),
        }
    elif isinstance(member, Mapping) and "messages" in member:
        messages = to_ors_messages(member["messages"])
        own = dict(member.get("metadata") or {})
    elif isinstance(member, Sequence) and not isinstance(member, str | bytes):
        messages = to_ors_messages(member)
    else:
        raise TypeError(
            "a group member must be a recorded trajectory (from read_trajectories), a "
            "conversation (a list of messages) or {'messages': [...], 'metadata': ...}; "
            f"got {type(member).__name__}"
        )
    if not messages:
        raise ValueError(f"group member {index} has no messages")
    meta = dict(metadata) if metadata is not None else own
    if index is not None:
        meta.setdefault("candidate", index)
    return {"messages": messages, "metadata": meta}


def _downgrade(message: Message, allowed: set[str]) -> Message:
    """``message`` with block types the server does not accept rewritten as text.

    Servers before SDK 0.1.157 take text and image blocks only: tool calls,
    tool results and reasoning become text lines there.
    """
    if all(b.type in allowed for b in message.blocks):
        return message
    blocks: list[MessageBlock] = []
    for b in message.blocks:
        if b.type in allowed:
            blocks.append(b)
        elif isinstance(b, ToolResultBlock):
            blocks.append(TextBlock(text=f"[tool_result {b.tool_call_id}]"))
            blocks.extend(x for x in b.blocks if x.type in allowed)
        elif b.type == "tool_call":
            blocks.append(TextBlock(text=f"[tool_call {b.name}({b.input})]"))
        elif b.type == "reasoning":
            blocks.append(TextBlock(text=f"[reasoning] {b.text}"))
    return Message(role=message.role, blocks=blocks, detail=message.detail)
