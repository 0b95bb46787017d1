"""The one place a token row grows, for every driver (``TokenEnv``, the batch, ``run_free``,
the worker, the capture gateway).

:class:`RowEngine` holds one :class:`~ors_gym.tokens.Trajectory` and is the only code that
opens a :class:`~ors_gym.tokens.TokenRow`, appends to one, or closes a superseded
row's last turn. A driver plans how the record grows before anything changes
(:meth:`RowEngine.follow`: the ids after a sampled turn that render the next messages,
where the bridge proves them append-only; :meth:`RowEngine.restart`: the turn closed and a
new row from a conversation; :meth:`RowEngine.closing`: the turn closed only) and, once
nothing can raise, records it (:meth:`RowEngine.add_turn`, :meth:`RowEngine.grow`).
``TokenEnv`` adds a turn and grows past it in one step; the gateway grows past the last
turn when the next request arrives, then adds the new turn. An assistant turn is
rendered by its family's :meth:`~ors_gym.families.Family.assistant_message`
(:meth:`RowEngine.message`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ors_gym.actions import AssistantTurn
from ors_gym.families import DEFAULT
from ors_gym.tokens._vision import Pending, accept, extend_row, row_images
from ors_gym.tokens.bridge import Bridge, Messages, Tools
from ors_gym.tokens.trajectory import TokenRow, Trajectory

__all__ = ["Growth", "RowEngine", "Sampled"]


@dataclass(frozen=True)
class Sampled:
    """A sampled turn: its row's ids before it, its ids, and its message."""

    before: list[int]
    ids: list[int]
    message: dict[str, Any]


@dataclass(frozen=True)
class Growth:
    """How the record grows past a sampled turn, planned before anything changes: ``tail``
    appended to the last row (the next messages' ids, or the turn's closing ids), the
    messages it renders and the images its ids hold; then maybe a new row (``row``),
    read from ``history``, which becomes ``Trajectory.messages``."""

    tail: list[int]
    said: list[dict[str, Any]] = field(default_factory=list)
    images: Pending | None = None
    row: TokenRow | None = None
    history: list[dict[str, Any]] | None = None
    row_images: Pending | None = None

    @property
    def new_row(self) -> bool:
        return self.row is not None


class RowEngine:
    """The rows of ``trajectory`` and the steps that grow them, rendered by ``bridge``."""

    def __init__(self, bridge: Bridge, trajectory: Trajectory) -> None:
        self.bridge = bridge
        self.trajectory = trajectory
        self.last: Sampled | None = None  # the last turn sampled, its row not grown past it

    # -- planning: nothing changes ------------------------------------------------------
    def message(self, turn: AssistantTurn, text: str | None = None) -> dict[str, Any]:
        """``turn`` as the chat message its family's template renders; for a family that
        cannot be told, the completion's ``text`` where given."""
        fam = self.bridge.family
        if fam.name == DEFAULT and text is not None:
            return {"role": "assistant", "content": text}
        return fam.assistant_message(turn)

    def turn(self, ids: list[int], message: dict[str, Any]) -> Sampled:
        """A turn sampled after the last row's ids (not yet added)."""
        return Sampled(self.trajectory.rows[-1].ids, list(ids), message)

    def follow(self, turn: Sampled, new: Messages, tools: Tools) -> Growth | None:
        """The ids after ``turn`` that render ``new``, appended to its row, where the
        bridge proves the row append-only; else None."""
        row = self.trajectory.rows[-1]
        added, pending = extend_row(self.bridge, row, turn.before, turn.ids, new, tools,
                                    turn.message)
        if added is None:
            return None
        return Growth(added, [dict(m) for m in new], pending)

    def restart(self, turn: Sampled | None, history: Messages, tools: Tools) -> Growth:
        """``turn`` closed (if any), then a new row read from ``history``."""
        tail = self.bridge.close(turn.ids) if turn is not None else []
        conversation = [dict(m) for m in history]
        prompt = self.bridge.prompt(conversation, tools)
        return Growth(tail, row=TokenRow(prompt_ids=prompt, first_message=len(conversation)),
                      history=conversation, row_images=row_images(self.bridge, conversation))

    @staticmethod
    def unrendered(history: Messages) -> Growth:
        """A new row with no ids, for ``history`` the bridge could not render."""
        conversation = [dict(m) for m in history]
        return Growth([], row=TokenRow(prompt_ids=[], first_message=len(conversation)),
                      history=conversation)

    def closing(self, turn: Sampled | None) -> Growth:
        """``turn`` closed (the model reads no more after it)."""
        return Growth(self.bridge.close(turn.ids) if turn is not None else [])

    # -- recording: nothing below raises ------------------------------------------------
    def add_turn(self, ids: list[int], logprobs: list[float] | None, version: int | None,
                 message: dict[str, Any]) -> None:
        """Append a sampled turn to the last row: its ids (mask 1, with their logprobs),
        its policy version and message. It stays :attr:`last` until grown past."""
        traj = self.trajectory
        row = traj.rows[-1]
        self.last = Sampled(row.ids, list(ids), message)
        row.add(list(ids), sampled=True, logprobs=logprobs)
        row.turns += 1
        traj.policy_versions.append(version)
        traj.logprobs_given = traj.logprobs_given and logprobs is not None
        traj.messages.append(message)

    def grow(self, growth: Growth) -> TokenRow:
        """Record ``growth`` (planned past :attr:`last`): its tail in the last row (mask 0),
        then its new row; the row the episode continues in."""
        traj = self.trajectory
        if traj.rows:
            row = traj.rows[-1]
            row.add(growth.tail, sampled=False)
            accept(row, growth.images)  # the images, now that their ids are in
        traj.messages += growth.said
        if growth.row is not None:
            accept(growth.row, growth.row_images)
            traj.rows.append(growth.row)
            assert growth.history is not None
            traj.messages[:] = growth.history
        self.last = None
        row = traj.rows[-1]
        traj.multi_modal_data = row.multi_modal_data
        return row
