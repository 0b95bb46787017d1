"""One ``OrsEnv.step`` as conversation: the assistant turn and the environment's reply.

``OrsEnv.step`` reports its calls' results in ``info`` (``info["calls"]``,
``info["blocks"]``); a conversation needs each result tied to the call id it
answers. :func:`step_exchange` does the tying, and :func:`exchange_messages`
writes the step as two ORS :class:`~ors_gym.protocol.Message` turns (ORS
follows Anthropic's placement: tool results ride in the user turn).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_gym.formats.outputs import AssistantTurn, call_id
from ors_gym.formats.shapes import as_plain
from ors_gym.protocol import (
    Block,
    ImageBlock,
    Message,
    MessageBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    parse,
)

__all__ = [
    "NOT_RUN_ENDED",
    "NOT_RUN_ERROR",
    "NOT_RUN_LIMIT",
    "StepExchange",
    "ToolResult",
    "as_block",
    "exchange_messages",
    "step_exchange",
]

logger = logging.getLogger("ors_gym")

#: What a result says for a call of the turn that never ran.
NOT_RUN_ENDED = "Not run: an earlier call in this turn ended the episode."
NOT_RUN_LIMIT = "Not run: this turn had more tool calls than the environment runs per step."
NOT_RUN_ERROR = "Not run: the episode ended on an error before this call."


@dataclass(frozen=True)
class ToolResult:
    """What one call of a step returned.

    ``tool_call_id`` is None for a plain message the environment routed to its
    terminal tool (the model called nothing, so there is no call to answer).
    """

    tool_call_id: str | None
    name: str
    input: dict[str, Any]
    ok: bool
    blocks: tuple[Block, ...]
    reward: float = 0.0
    finished: bool = False
    error: str | None = None
    error_reason: str | None = None
    metadata: Any = None
    seconds: float | None = None


@dataclass(frozen=True)
class StepExchange:
    """One ``OrsEnv.step`` as conversation: the assistant turn and what came back.

    ``results`` are the calls that ran, in order; ``not_run`` are
    ``(tool_call_id, why)`` for calls of the turn that did not; ``feedback``
    is the environment's text that answers no call (a nudge after a turn with
    no tool call, notes on calls that could not be parsed, an error).
    """

    turn: AssistantTurn
    results: tuple[ToolResult, ...]
    not_run: tuple[tuple[str, str], ...] = ()
    feedback: tuple[Block, ...] = field(default=())

    @property
    def routed(self) -> bool:
        """True when a plain message went to the environment's terminal tool."""
        return any(r.tool_call_id is None for r in self.results)


def step_exchange(
    turn: AssistantTurn, info: Mapping[str, Any], *, max_calls_per_step: int = 16
) -> StepExchange:
    """Tie the step's results (``info["calls"]``, ``info["blocks"]``) to the turn's calls.

    Each ``info["calls"][i]`` answers ``turn.tool_calls[i]``. The blocks of
    call ``i`` are ``info["calls"][i]["blocks"]`` when the environment gives
    them; otherwise they are cut out of ``info["blocks"]``, where ``OrsEnv``
    puts a ``[name]`` header before each call's blocks when a turn has several
    calls, and its notes last. ``max_calls_per_step`` must match the env's.
    """
    blocks = [as_block(b) for b in info.get("blocks") or ()]
    calls = [c for c in info.get("calls") or () if isinstance(c, Mapping)]
    planned = turn.tool_calls[:max_calls_per_step]
    routed = not turn.tool_calls and not turn.errors and len(calls) == 1
    per_call, feedback = _cut_blocks(blocks, calls, turn, info, max_calls_per_step)

    results: list[ToolResult] = []
    for i, (call, own) in enumerate(zip(calls, per_call, strict=True)):
        if routed:
            tool_call_id = None
        elif i < len(planned):
            tool_call_id = planned[i].id
            if planned[i].name != call.get("name"):
                logger.debug(
                    "step result %d is for %r, the turn's call %d is %r",
                    i, call.get("name"), i, planned[i].name,
                )
        else:
            tool_call_id = call_id(-1, i)
        results.append(
            ToolResult(
                tool_call_id=tool_call_id,
                name=str(call.get("name", "")),
                input=dict(call.get("input") or {}),
                ok=bool(call.get("ok", True)),
                blocks=tuple(own),
                reward=float(call.get("reward") or 0.0),
                finished=bool(call.get("finished", False)),
                error=call.get("error"),
                error_reason=call.get("error_reason"),
                metadata=call.get("metadata"),
                seconds=call.get("seconds"),  # an ors_gym.env.Elapsed: equal to any other
            )
        )
    not_run: list[tuple[str, str]] = []
    if not routed:
        ended = any(r.finished for r in results)
        for i, tc in enumerate(turn.tool_calls[len(calls) :], start=len(calls)):
            assert tc.id is not None
            if ended:
                why = NOT_RUN_ENDED
            elif i >= max_calls_per_step:
                why = NOT_RUN_LIMIT
            else:
                why = NOT_RUN_ERROR
            not_run.append((tc.id, why))
    return StepExchange(turn, tuple(results), tuple(not_run), tuple(feedback))


def _cut_blocks(
    blocks: list[Block],
    calls: list[Mapping[str, Any]],
    turn: AssistantTurn,
    info: Mapping[str, Any],
    max_calls: int,
) -> tuple[list[list[Block]], list[Block]]:
    """(blocks of each call, the remaining feedback blocks) of one step."""
    multi = min(len(turn.tool_calls), max_calls) > 1
    per_call: list[list[Block]] = []
    pos = 0
    if calls and all("blocks" in c for c in calls):
        for call in calls:
            if multi and pos < len(blocks) and _is_header(blocks[pos], call):
                pos += 1
            own = [as_block(b) for b in call["blocks"] or ()]
            per_call.append(own)
            pos += len(own)
        return per_call, blocks[pos:]
    # OrsEnv appends, after the calls' blocks: the error that ended the episode, then
    # one note per unparseable call and one if the turn had too many calls.
    trailing = len(turn.errors) + int(len(turn.tool_calls) > max_calls)
    if info.get("truncation_reason") in ("session_lost", "server_error"):
        trailing += 1
    end = max(0, len(blocks) - trailing)
    for i, call in enumerate(calls):
        if multi and pos < end and _is_header(blocks[pos], call):
            pos += 1
        stop = end
        if multi and i + 1 < len(calls):
            nxt = next(
                (j for j in range(pos, end) if _is_header(blocks[j], calls[i + 1])), None
            )
            stop = nxt if nxt is not None else end
        per_call.append(blocks[pos:stop])
        pos = stop
    return per_call, blocks[pos:]


def _is_header(block: Block, call: Mapping[str, Any]) -> bool:
    return isinstance(block, TextBlock) and block.text == f"[{call.get('name')}]"


def as_block(block: Any) -> Block:
    """A text or image block from a protocol model, an SDK block, or a dict."""
    if isinstance(block, TextBlock | ImageBlock):
        return block
    plain = as_plain(block)
    return parse(Block, plain, what="content block")


def exchange_messages(exchange: StepExchange) -> list[Message]:
    """The step as two ORS messages: the assistant turn, then the environment's reply.

    The reply holds one ``tool_result`` per call of the turn (calls that did
    not run get an error result saying why), then the routed terminal tool's
    blocks and any feedback, in that order.
    """
    turn = exchange.turn
    said: list[MessageBlock] = [*turn.reasoning]
    if turn.text:
        said.append(TextBlock(text=turn.text))
    for tc in turn.tool_calls:
        assert tc.id is not None
        said.append(ToolCallBlock(id=tc.id, name=tc.name, input=dict(tc.arguments)))
    reply: list[MessageBlock] = []
    answered: list[MessageBlock] = []
    for result in exchange.results:
        if result.tool_call_id is None:
            answered.extend(result.blocks)
        else:
            reply.append(
                ToolResultBlock(
                    tool_call_id=result.tool_call_id,
                    blocks=list(result.blocks),
                    is_error=not result.ok,
                )
            )
    for tool_call_id, why in exchange.not_run:
        reply.append(
            ToolResultBlock(tool_call_id=tool_call_id, blocks=[TextBlock(text=why)], is_error=True)
        )
    reply.extend(answered)
    reply.extend(exchange.feedback)
    return [Message(role="assistant", blocks=said), Message(role="user", blocks=reply)]
