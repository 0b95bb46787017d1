"""One capture session: its trajectory, and how a request continues it or starts a row.

The session remembers, for its last row, the conversation the row's ids stand for:
each message as the request sent it, and each sampled assistant turn as recorded
(its content and calls as the family's parser read them). A request continues the
row when its tools are the row's and its messages begin with the row's, each echoed
assistant turn matching the recorded one by content and calls (reasoning the harness
dropped, ids it renamed, arguments it re-serialised are not compared: those turns are
never rendered again, their sampled ids stay); the bridge then appends only the new
messages' ids. Anything else (compaction, an edited or dropped message, changed tools,
a template that rewrites history) starts a new row of the same
:class:`~ors_gym.tokens.Trajectory`, as ``TokenEnv`` does.

The rows grow only through the token engine
(:class:`ors_gym.tokens.engine.RowEngine`), as ``TokenEnv``'s do:
:meth:`CaptureSession.plan` plans a turn's prompt without touching the record;
:meth:`CaptureSession.commit` records it once the reply is built. A request's
assistant messages are read as :class:`~ors_gym.actions.AssistantTurn` and
rendered by the family's ``assistant_message``, as a sampled turn is.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_gym.actions import AssistantTurn, ToolCall
from ors_gym.gateway.errors import GatewayError
from ors_gym.protocol import ReasoningBlock
from ors_gym.sampling import Sample
from ors_gym.tokens import Bridge, Trajectory
from ors_gym.tokens.engine import Growth, RowEngine

__all__ = ["CaptureSession", "Plan", "Recorded", "request_turn"]


@dataclass(frozen=True)
class Recorded:
    """A sampled assistant turn as recorded: the content and calls an echo of it is
    matched by."""

    content: str
    calls: tuple[tuple[str, str], ...]  # (name, arguments as canonical JSON)


@dataclass(frozen=True)
class Plan:
    """A turn's prompt, before sampling: the ids sampled from, and how the row grows."""

    prompt: list[int]
    growth: Growth
    entries: list[dict[str, Any] | Recorded]  # the row's conversation once committed
    tools: list[dict[str, Any]]
    tools_key: str

    @property
    def new_row(self) -> bool:
        return self.growth.new_row


@dataclass
class CaptureSession:
    """One agent's capture session: its id and key, trajectory and last row's state."""

    id: str
    key: str = field(repr=False)  # a credential: never shown
    trajectory: Trajectory = field(repr=False)
    closed: bool = False
    entries: list[dict[str, Any] | Recorded] = field(default_factory=list)
    tools_key: str = ""
    rows: RowEngine | None = field(default=None, repr=False)  # the engine, from the first plan
    context_overflows: int = 0  # turns refused for a prompt at or over the context length
    last_refusal: str | None = None  # the code (else the status) of the last refused turn

    def refused(self, error: GatewayError) -> None:
        """Record a turn refused with ``error`` (the trajectory is not touched)."""
        if error.code == "context_length_exceeded":
            self.context_overflows += 1
        self.last_refusal = error.code or str(error.status)

    @classmethod
    def new(cls, renderer: str) -> CaptureSession:
        return cls(
            id=secrets.token_hex(12),
            key="sk-ors-" + secrets.token_urlsafe(24),
            trajectory=Trajectory(rows=[], messages=[], tools=[], renderer=renderer),
        )

    def _rows(self, bridge: Bridge) -> RowEngine:
        if self.rows is None:
            self.rows = RowEngine(bridge, self.trajectory)
        return self.rows

    # -- before sampling ----------------------------------------------------------------
    def plan(self, bridge: Bridge, messages: list[dict[str, Any]],
             tools: list[dict[str, Any]], *, variant: str | None = None) -> Plan:
        """The prompt for ``messages`` and ``tools``: the row's ids plus the new messages'
        where the request continues the row, else a new row's rendering. ``bridge``
        renders this request (``variant`` names its template arguments, e.g. a reasoning
        effort: a changed variant renders the conversation anew, so starts a new row)."""
        if messages[-1]["role"] == "assistant":
            raise GatewayError(400, "the last message is an assistant turn: the gateway "
                                    "samples a whole new turn, so end with a user or tool "
                                    "message", param="messages")
        rows = self._rows(bridge)
        rows.bridge = bridge  # renders this request's ids (the record is not touched)
        tools_key = json.dumps([tools, variant], sort_keys=True)
        cut = self._continues(messages, tools_key)
        if cut is not None and rows.last is not None:  # the new messages hold no assistant turn
            growth = rows.follow(rows.last, messages[cut:], tools)
            if growth is not None:
                prompt = [*self.trajectory.rows[-1].ids, *growth.tail]
                return Plan(prompt, growth, [*self.entries, *messages[cut:]], tools, tools_key)
        conversation = [rows.message(request_turn(m)) if m["role"] == "assistant" else m
                        for m in messages]
        growth = rows.restart(rows.last, conversation, tools)
        assert growth.row is not None
        return Plan(list(growth.row.prompt_ids), growth, list(messages), tools, tools_key)

    def _continues(self, messages: list[dict[str, Any]], tools_key: str) -> int | None:
        """Where the request's new messages start, if it continues the last row."""
        entries = self.entries
        if not entries or tools_key != self.tools_key or len(messages) <= len(entries):
            return None
        for entry, message in zip(entries, messages, strict=False):
            if isinstance(entry, Recorded):
                if not _echoes(message, entry):
                    return None
            elif entry != message:
                return None
        if any(m["role"] == "assistant" for m in messages[len(entries):]):
            return None  # a turn the model did not sample here: not the row's ids
        return len(entries)

    # -- after the reply is built -----------------------------------------------------------
    def commit(self, bridge: Bridge, plan: Plan, sample: Sample, turn: AssistantTurn) -> None:
        """Record the sampled turn (the reply is built: nothing below can fail on input)."""
        if self.closed:
            raise GatewayError(404, f"session {self.id} was closed while its turn was "
                                    "sampled; the turn is not recorded")
        rows = self._rows(bridge)
        rows.grow(plan.growth)  # the last turn grown past: the new messages, or a new row
        # the sampler's policy version where it names one (a plain Sample names none)
        version = sample.policy_version
        rows.add_turn(list(sample.ids), sample.logprobs, version, rows.message(turn))
        self.trajectory.tools = plan.tools
        calls = tuple((c.name, _canonical(c.arguments)) for c in turn.tool_calls)
        self.entries = [*plan.entries, Recorded(turn.text.strip(), calls)]
        self.tools_key = plan.tools_key

    def finish(self, bridge: Bridge, rewards: list[float], stop_reason: str) -> Trajectory:
        """Close the session: the last turn closed if cut, the episode's rewards given."""
        traj = self.trajectory
        if not self.closed and self.rows is not None and self.rows.last is not None:
            self.rows.grow(self.rows.closing(self.rows.last))
        self.closed = True
        traj.rewards = [float(r) for r in rewards]
        traj.stop_reason = stop_reason
        return traj


def request_turn(message: Mapping[str, Any]) -> AssistantTurn:
    """A request's assistant message (``{"role", "content", "reasoning", "calls"}``, as
    :mod:`ors_gym.gateway.requests` reads it) as the turn its family renders."""
    reasoning = message.get("reasoning")
    return AssistantTurn(
        tool_calls=tuple(ToolCall(c["name"], c["arguments"], c.get("id"))
                         for c in message.get("calls") or ()),
        text=str(message.get("content") or ""),
        reasoning=(ReasoningBlock(text=str(reasoning)),) if reasoning else (),
    )


def _echoes(message: Mapping[str, Any], turn: Recorded) -> bool:
    """Whether a request's assistant message is the recorded turn sent back."""
    if message.get("role") != "assistant":
        return False
    if str(message.get("content") or "").strip() != turn.content:
        return False
    calls = tuple((c["name"], _canonical(c["arguments"])) for c in message.get("calls", ()))
    return calls == turn.calls


def _canonical(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)
