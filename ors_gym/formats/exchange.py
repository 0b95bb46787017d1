"""One ``OrsEnv.step`` as conversation: the assistant turn and the environment's reply.

``OrsEnv.step`` reports its calls' results in ``info["calls"]``, each record with
the id of the call it answers (the turn's own ids: the step runs the turn's calls
as they are). :func:`step_exchange` ties them to the turn's calls by id, and
:func:`exchange_messages`
writes the step as two ORS :class:`~ors_gym.protocol.Message` turns (ORS
follows Anthropic's placement: tool results ride in the user turn).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_gym.actions import AssistantTurn
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


def step_exchange(turn: AssistantTurn, info: Mapping[str, Any]) -> StepExchange:
    """Tie the step's results (``info["calls"]``) to the turn's calls, by id.

    Each record of ``info["calls"]`` carries the id of the call it answers (None for
    a plain message routed to the terminal tool) and its own ``blocks``; what else
    ``info["blocks"]`` holds (a ``[name]`` header before each call's blocks when a
    turn has several calls, then the env's notes) is feedback. A call of the turn
    with no record did not run: the episode ended before it, it failed, or the turn
    had more calls than the env runs per step.
    """
    blocks = [as_block(b) for b in info.get("blocks") or ()]
    calls = [c for c in info.get("calls") or () if isinstance(c, Mapping)]
    results = [_result(call) for call in calls]
    pos = 0
    multi = len(calls) > 1 or len(turn.tool_calls) > 1  # then the env wrote [name] headers
    for call, result in zip(calls, results, strict=True):
        if multi and pos < len(blocks) and _is_header(blocks[pos], call):
            pos += 1
        pos += len(result.blocks)
    feedback = blocks[pos:]
    ran = {r.tool_call_id for r in results}
    ended = any(r.finished for r in results)
    why = NOT_RUN_ENDED if ended else NOT_RUN_ERROR if "error" in info else NOT_RUN_LIMIT
    not_run = tuple((tc.id, why) for tc in turn.tool_calls
                    if tc.id is not None and tc.id not in ran)
    return StepExchange(turn, tuple(results), not_run, tuple(feedback))


def _result(call: Mapping[str, Any]) -> ToolResult:
    return ToolResult(
        tool_call_id=call.get("id"),
        name=str(call.get("name", "")),
        input=dict(call.get("input") or {}),
        ok=bool(call.get("ok", True)),
        blocks=tuple(as_block(b) for b in call.get("blocks") or ()),
        reward=float(call.get("reward") or 0.0),
        finished=bool(call.get("finished", False)),
        error=call.get("error"),
        error_reason=call.get("error_reason"),
        metadata=call.get("metadata"),
        seconds=call.get("seconds"),  # an ors_gym.env.Elapsed: equal to any other
    )


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
