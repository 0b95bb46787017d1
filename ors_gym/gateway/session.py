"""One capture session: its trajectory, and how a request continues it or starts a row.

The session remembers, for its last row, the conversation the row's ids stand for:
each message as the request sent it, and each sampled assistant turn as recorded
(its ids, and its content and calls as the family's parser read them). A request
continues the row when its tools are the row's and its messages begin with the
row's, each echoed assistant turn matching the recorded one by content and calls
(reasoning the harness dropped, ids it renamed, arguments it re-serialised are not
compared: those turns are never rendered again, their sampled ids stay); the bridge
then appends only the new messages' ids. Anything else (compaction, an edited or
dropped message, changed tools, a template that rewrites history) starts a new row
of the same :class:`~ors_gym.tokens.Trajectory`, as ``TokenEnv`` does.

:meth:`CaptureSession.plan` computes a turn's prompt without touching the record;
:meth:`CaptureSession.commit` records it once the reply is built.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_gym.actions import AssistantTurn
from ors_gym.families import Family
from ors_gym.gateway.errors import GatewayError
from ors_gym.sampling import Sample
from ors_gym.tokens import Bridge, TokenRow, Trajectory

__all__ = ["CaptureSession", "Plan", "Recorded"]


@dataclass(frozen=True)
class Recorded:
    """A sampled assistant turn as recorded: its ids, the template's message for it, and
    the content and calls an echo of it is matched by."""

    ids: list[int]
    message: dict[str, Any]
    content: str
    calls: tuple[tuple[str, str], ...]  # (name, arguments as canonical JSON)


@dataclass(frozen=True)
class Plan:
    """A turn's prompt, before sampling: the ids sampled from, and how the row grows."""

    prompt: list[int]
    new_row: bool
    added: list[int]  # ids appended to the row before the completion (continuing only)
    conversation: list[dict[str, Any]]  # the request's messages as the template reads them
    entries: list[dict[str, Any] | Recorded]  # the row's conversation once committed
    tools: list[dict[str, Any]]
    tools_key: str


@dataclass
class CaptureSession:
    """One agent's capture session: its id and key, trajectory and last row's state."""

    id: str
    key: str = field(repr=False)  # a credential: never shown
    trajectory: Trajectory = field(repr=False)
    closed: bool = False
    entries: list[dict[str, Any] | Recorded] = field(default_factory=list)
    tools_key: str = ""
    before_last: list[int] = field(default_factory=list)  # row ids before the last turn

    @classmethod
    def new(cls, renderer: str) -> CaptureSession:
        return cls(
            id=secrets.token_hex(12),
            key="sk-ors-" + secrets.token_urlsafe(24),
            trajectory=Trajectory(rows=[], messages=[], tools=[], renderer=renderer),
        )

    # -- before sampling ----------------------------------------------------------------
    def plan(self, bridge: Bridge, messages: list[dict[str, Any]],
             tools: list[dict[str, Any]]) -> Plan:
        """The prompt for ``messages`` and ``tools``: the row's ids plus the new messages'
        where the request continues the row, else a new row's rendering."""
        if messages[-1]["role"] == "assistant":
            raise GatewayError(400, "the last message is an assistant turn: the gateway "
                                    "samples a whole new turn, so end with a user or tool "
                                    "message", param="messages")
        fam = bridge.family
        conversation = [_template_message(m, fam) for m in messages]
        tools_key = json.dumps(tools, sort_keys=True)
        cut = self._continues(messages, tools_key)
        if cut is not None:
            last = self.entries[-1]
            assert isinstance(last, Recorded)
            new = conversation[cut:]
            added = bridge.extend(self.before_last, last.ids, new, tools, turn=last.message)
            if added is not None:
                row = self.trajectory.rows[-1]
                return Plan([*row.ids, *added], False, added, conversation,
                            [*self.entries, *messages[cut:]], tools, tools_key)
        prompt = bridge.prompt(conversation, tools)
        return Plan(prompt, True, [], conversation, list(messages), tools, tools_key)

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
        traj = self.trajectory
        message = bridge.family.assistant_message(turn)
        if plan.new_row:
            if traj.rows:  # the superseded row's last turn, closed
                old = traj.rows[-1]
                last = self.entries[-1]
                assert isinstance(last, Recorded)
                old.add(bridge.close(last.ids), sampled=False)
            traj.rows.append(TokenRow(prompt_ids=list(plan.prompt),
                                      first_message=len(plan.conversation)))
        row = traj.rows[-1]
        row.add(plan.added, sampled=False)
        self.before_last = row.ids
        row.add(list(sample.ids), sampled=True, logprobs=sample.logprobs)
        row.turns += 1
        traj.logprobs_given = traj.logprobs_given and sample.logprobs is not None
        fam = bridge.family  # the conversation with each recorded turn as it was sampled
        traj.messages = [e.message if isinstance(e, Recorded) else _template_message(e, fam)
                         for e in plan.entries] + [message]
        traj.tools = plan.tools
        calls = tuple((c.name, _canonical(c.arguments)) for c in turn.tool_calls)
        self.entries = [*plan.entries, Recorded(list(sample.ids), message,
                                                turn.text.strip(), calls)]
        self.tools_key = plan.tools_key

    def finish(self, bridge: Bridge, rewards: list[float], stop_reason: str) -> Trajectory:
        """Close the session: the last turn closed if cut, the episode's rewards given."""
        traj = self.trajectory
        if not self.closed and traj.rows and self.entries:
            last = self.entries[-1]
            if isinstance(last, Recorded):
                traj.rows[-1].add(bridge.close(last.ids), sampled=False)
        self.closed = True
        traj.rewards = [float(r) for r in rewards]
        traj.stop_reason = stop_reason
        return traj


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


def _template_message(message: dict[str, Any], fam: Family) -> dict[str, Any]:
    """A request message as the family's chat template reads it (assistant turns: the
    reasoning in the template's field, the calls' arguments as it takes them)."""
    if message["role"] != "assistant":
        return message
    out: dict[str, Any] = {"role": "assistant", "content": message["content"]}
    if message.get("reasoning"):
        out[fam.reasoning_field] = message["reasoning"]
    if message.get("calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {
                "name": c["name"],
                "arguments": json.dumps(c["arguments"]) if fam.string_arguments
                else c["arguments"]}}
            for c in message["calls"]
        ]
    return out
