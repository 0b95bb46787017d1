"""ORS tools and turns in the formats LLM APIs use, and back.

An LLM harness around an ORS environment converts in four places, all here:

- :func:`tools_as`: the session's tools as function-calling definitions for
  OpenAI chat, OpenAI Responses, Anthropic, or plain JSON Schema.
- :func:`as_action` / :func:`assistant_turn`: a model client's raw output (an
  OpenAI chat message or completion, Anthropic content blocks or message,
  OpenAI Responses output items or response) as an action ``OrsEnv.step``
  takes, with its text, tool calls (ids filled in) and reasoning.
- :func:`step_exchange` / :func:`exchange_messages`: one ``OrsEnv.step``
  (its action and ``info``) as ORS :class:`~ors_gym.protocol.Message` turns,
  an assistant turn and the environment's reply, each tool result tied to its
  call id.
- :func:`render_messages` / :func:`to_ors_messages`: ORS messages as OpenAI
  chat or Anthropic messages, and such messages back as ORS messages.

ORS messages follow Anthropic's placement (tool results ride in user turns);
OpenAI chat puts each result in a ``tool`` message, and since it accepts
images only in user messages, a tool's images follow in one user message.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ors_gym.actions import ToolCall, parse_action
from ors_gym.errors import OrsActionError
from ors_gym.protocol import (
    Block,
    ImageBlock,
    ListToolsOutput,
    Message,
    MessageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    parse,
)

__all__ = [
    "MESSAGE_FORMATS",
    "TOOL_FORMATS",
    "AssistantTurn",
    "MessageFormat",
    "StepExchange",
    "ToolFormat",
    "ToolResult",
    "as_action",
    "as_block",
    "assistant_turn",
    "call_id",
    "exchange_messages",
    "render_messages",
    "step_exchange",
    "to_ors_messages",
    "tools_as",
]

logger = logging.getLogger("ors_gym")

ToolFormat = Literal["openai", "anthropic", "json_schema", "openai_responses"]
MessageFormat = Literal["openai", "anthropic", "ors"]
TOOL_FORMATS: tuple[str, ...] = get_args(ToolFormat)
MESSAGE_FORMATS: tuple[str, ...] = get_args(MessageFormat)

#: What a result says for a call of the turn that never ran.
NOT_RUN_ENDED = "Not run: an earlier call in this turn ended the episode."
NOT_RUN_LIMIT = "Not run: this turn had more tool calls than the environment runs per step."
NOT_RUN_ERROR = "Not run: the episode ended on an error before this call."

_TEXT_TYPES = frozenset({"text", "output_text", "input_text"})
_CALL_TYPES = frozenset({"tool_use", "function_call", "function"})
_CONTENT_TYPES = _TEXT_TYPES | frozenset(
    {"thinking", "redacted_thinking", "reasoning", "message", "refusal", "tool_call"}
)


# ----------------------------------------------------------------------- tools


def tools_as(
    tools: ListToolsOutput | Iterable[ToolSpec | Mapping[str, Any]], fmt: str = "openai"
) -> list[dict[str, Any]]:
    """The tools as function-calling definitions in format ``fmt``.

    ``fmt``: ``"openai"`` (chat completions ``{"type": "function", "function":
    {...}}``), ``"openai_responses"`` (``{"type": "function", "name", ...}``),
    ``"anthropic"`` (``{"name", "description", "input_schema"}``) or
    ``"json_schema"`` (``{"name", "description", "schema"}``). The terminal
    tool is not listed (ORS hides it: a plain message reaches it); a tool
    without an input schema gets an empty object schema. Schemas are copies.
    """
    if fmt not in TOOL_FORMATS:
        raise ValueError(f"unknown tool format {fmt!r}; choose one of {list(TOOL_FORMATS)}")
    specs = tools.tools if isinstance(tools, ListToolsOutput) else [_tool_spec(t) for t in tools]
    out: list[dict[str, Any]] = []
    for spec in specs:
        schema = (
            copy.deepcopy(spec.input_schema)
            if spec.input_schema is not None
            else {"type": "object", "properties": {}}
        )
        if fmt == "openai":
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        "description": spec.description,
                        "parameters": schema,
                    },
                }
            )
        elif fmt == "openai_responses":
            out.append(
                {
                    "type": "function",
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": schema,
                }
            )
        elif fmt == "anthropic":
            out.append(
                {"name": spec.name, "description": spec.description, "input_schema": schema}
            )
        else:
            out.append({"name": spec.name, "description": spec.description, "schema": schema})
    return out


def _tool_spec(tool: ToolSpec | Mapping[str, Any]) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    if isinstance(tool, Mapping):
        return parse(ToolSpec, dict(tool), what="tool spec")
    raise TypeError(
        f"tools must be a ListToolsOutput or ToolSpec objects/dicts, got {type(tool).__name__}"
    )


# ------------------------------------------------------------ model outputs


@dataclass(frozen=True)
class AssistantTurn:
    """A model's output read as one assistant turn.

    ``action`` is what to pass to ``OrsEnv.step``; ``tool_calls`` are the calls
    it parses to, each with an id (the model's, else ``call_<step>_<i>``).
    """

    action: Any
    text: str
    tool_calls: tuple[ToolCall, ...]
    reasoning: tuple[ReasoningBlock, ...] = ()
    errors: tuple[str, ...] = ()


def call_id(step: int, index: int) -> str:
    """The id given to call ``index`` of step ``step`` when the model gave none."""
    return f"call_{step}_{index}"


def as_action(output: Any) -> Any:
    """A model client's raw output as an action ``parse_action`` accepts.

    Reads OpenAI chat messages (``{"role": "assistant", "content", "tool_calls"}``)
    and completions (``{"choices": [...]}``), Anthropic content-block lists and
    messages (text, thinking, ``tool_use``), OpenAI Responses output lists and
    responses (``message``, ``reasoning``, ``function_call`` items), ORS
    assistant messages, and the SDK objects of those clients (via
    ``model_dump``). Anything else (text, call dicts) is returned unchanged.
    """
    return _split_output(output)[0]


def assistant_turn(output: Any, *, step: int) -> AssistantTurn:
    """Parse a model's output (any shape :func:`as_action` reads) as turn ``step``.

    Raises :class:`~ors_gym.errors.OrsActionError` for a structurally invalid
    action, as ``OrsEnv.step`` would.
    """
    action, reasoning = _split_output(output)
    parsed = parse_action(action)
    calls = tuple(
        ToolCall(c.name, c.arguments, c.id or call_id(step, i))
        for i, c in enumerate(parsed.tool_calls)
    )
    return AssistantTurn(action, parsed.message, calls, tuple(reasoning), parsed.errors)


def _split_output(output: Any) -> tuple[Any, list[ReasoningBlock]]:
    """(action, reasoning) for a raw model output; unknown shapes pass through."""
    output = _plain(output)
    if isinstance(output, Mapping):
        choices = output.get("choices")
        if "role" not in output and isinstance(choices, list | tuple) and choices:
            first = _plain(choices[0])
            message = first.get("message") if isinstance(first, Mapping) else None
            if message is not None:
                return _split_output(message)
        items = output.get("output")
        if "role" not in output and "name" not in output and isinstance(items, list | tuple):
            return _split_items(items)
        if output.get("role") == "assistant":
            return _split_message(output)
        return output, []
    if isinstance(output, list | tuple) and any(
        isinstance(item, Mapping) and item.get("type") in _CONTENT_TYPES
        for item in map(_plain, output)
    ):
        return _split_items(output)
    return output, []


def _plain(obj: Any) -> Any:
    """SDK objects (pydantic models of the OpenAI/Anthropic clients, ORS Messages) as dicts."""
    if isinstance(obj, Mapping | str | list | tuple | ToolCall) or obj is None:
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except TypeError:
            return dump()
    return obj


def _split_message(message: Mapping[str, Any]) -> tuple[Any, list[ReasoningBlock]]:
    """An assistant message: OpenAI chat, Anthropic, or ORS (``blocks``)."""
    texts: list[str] = []
    calls: list[Any] = []
    reasoning: list[ReasoningBlock] = []
    content = message.get("content")
    if content is None and "blocks" in message:
        content = message["blocks"]
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list | tuple):
        _collect_items(content, texts, calls, reasoning)
    elif content is not None:
        raise OrsActionError(
            f"the assistant message's content must be a str or a list of content blocks, "
            f"got {type(content).__name__}"
        )
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list | tuple):
        calls.extend(_plain(c) for c in tool_calls)
    elif tool_calls is not None:
        raise OrsActionError(
            f"the assistant message's tool_calls must be a list, got {type(tool_calls).__name__}"
        )
    legacy = message.get("function_call")  # OpenAI's pre-tools field
    if isinstance(legacy, Mapping):
        calls.append({"type": "function", "function": dict(legacy)})
    for key in ("reasoning_content", "reasoning"):  # OpenAI-compatible servers' reasoning
        if isinstance(message.get(key), str) and message[key]:
            reasoning.append(ReasoningBlock(text=message[key]))
    return _action(texts, calls), reasoning


def _split_items(items: Sequence[Any]) -> tuple[Any, list[ReasoningBlock]]:
    texts: list[str] = []
    calls: list[Any] = []
    reasoning: list[ReasoningBlock] = []
    _collect_items(items, texts, calls, reasoning)
    return _action(texts, calls), reasoning


def _action(texts: list[str], calls: list[Any]) -> Any:
    """Native calls with the text as message; without calls the text itself, so
    calls the model wrote into its text (``<tool_call>`` tags, JSON) still parse."""
    text = "\n".join(t for t in texts if t)
    if calls:
        return {"tool_calls": calls, "message": text}
    return text


def _collect_items(
    items: Iterable[Any], texts: list[str], calls: list[Any], reasoning: list[ReasoningBlock]
) -> None:
    for raw in items:
        item = _plain(raw)
        if isinstance(item, str):
            texts.append(item)
            continue
        if not isinstance(item, Mapping):
            calls.append(item)  # parse_action names what is wrong with it
            continue
        kind = item.get("type")
        if kind in _TEXT_TYPES:
            texts.append(str(item.get("text") or ""))
        elif kind == "refusal":
            texts.append(str(item.get("refusal") or ""))
        elif kind == "thinking":
            thought = str(item.get("thinking") or "")
            reasoning.append(ReasoningBlock(text=thought, signature=item.get("signature")))
        elif kind == "reasoning":
            reasoning.append(ReasoningBlock(text=_reasoning_text(item)))
        elif kind == "message":  # an OpenAI Responses output message
            inner = item.get("content")
            if isinstance(inner, str):
                texts.append(inner)
            elif isinstance(inner, list | tuple):
                _collect_items(inner, texts, calls, reasoning)
        elif kind == "tool_call":  # an ORS ToolCallBlock
            calls.append({"name": item.get("name"), "arguments": item.get("input"),
                          "id": item.get("id")})
        elif kind in _CALL_TYPES or "name" in item or "function" in item:
            calls.append(item)
        elif kind == "redacted_thinking":
            continue
        else:
            logger.debug("ignoring model output item of type %r", kind)


def _reasoning_text(item: Mapping[str, Any]) -> str:
    """The text of a reasoning item: ORS ``text``, or Responses summary/content parts."""
    if isinstance(item.get("text"), str):
        return str(item["text"])
    parts: list[str] = []
    for key in ("summary", "content"):
        for part in item.get(key) or ():
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    return "\n".join(parts)


# ---------------------------------------------------------------- one step


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
    plain = _plain(block)
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


# ------------------------------------------------------------------ rendering


def render_messages(messages: Iterable[Message], fmt: str) -> list[Any]:
    """ORS messages as ``fmt`` messages: ``"openai"`` chat dicts, ``"anthropic"``
    dicts, or ``"ors"`` (the Message objects themselves).

    OpenAI: an assistant message with ``tool_calls`` (arguments as JSON text),
    one ``tool`` message per result, then one user message with the rest
    (images as ``image_url`` data-URL parts, including the tools' images, which
    OpenAI accepts only in user messages). Anthropic: ``tool_use`` and
    ``tool_result`` blocks, images as base64 sources; system messages are left
    out (Anthropic takes the system prompt as a separate parameter).
    """
    if fmt not in MESSAGE_FORMATS:
        raise ValueError(f"unknown message format {fmt!r}; choose one of {list(MESSAGE_FORMATS)}")
    out: list[Any] = []
    for message in messages:
        if fmt == "ors":
            out.append(message)
        elif fmt == "openai":
            out.extend(_openai(message))
        elif message.role != "system":
            out.append(_anthropic(message))
    return out


def _data_url(block: ImageBlock) -> str:
    if block.data.startswith("data:"):
        return block.data
    return f"data:{block.mimeType};base64,{block.data}"


def _texts(blocks: Iterable[Any]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))


def _openai_parts(blocks: Iterable[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": _data_url(b)}})
    return parts


def _openai(message: Message) -> list[dict[str, Any]]:
    if message.role == "assistant":
        text = "\n".join(
            b.text for b in message.blocks if isinstance(b, TextBlock)
        )
        calls = [
            {
                "id": b.id,
                "type": "function",
                "function": {"name": b.name, "arguments": json.dumps(b.input)},
            }
            for b in message.blocks
            if isinstance(b, ToolCallBlock)
        ]
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            out["tool_calls"] = calls
        elif not text:
            out["content"] = ""
        return [out]
    rendered: list[dict[str, Any]] = []
    rest: list[Any] = []
    for b in message.blocks:
        if isinstance(b, ToolResultBlock):
            images = [i for i in b.blocks if isinstance(i, ImageBlock)]
            text = _texts(b.blocks)
            if not text:
                text = f"[{len(images)} image(s), in the next message]" if images else "(no output)"
            rendered.append({"role": "tool", "tool_call_id": b.tool_call_id, "content": text})
            if images:
                rest.append(TextBlock(text=f"Images returned by tool call {b.tool_call_id}:"))
                rest.extend(images)
        elif isinstance(b, TextBlock | ImageBlock):
            rest.append(b)
    if rest or not rendered:
        if message.role == "system" or all(isinstance(b, TextBlock) for b in rest):
            rendered.append({"role": message.role, "content": _texts(rest)})
        else:
            rendered.append({"role": message.role, "content": _openai_parts(rest)})
    return rendered


def _anthropic_content(blocks: Iterable[Any]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            if b.text:
                content.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            mime, data = b.mimeType, b.data
            if data.startswith("data:"):
                header, _, data = data.partition(",")
                mime = header[5:].split(";")[0] or mime
            content.append(
                {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
            )
        elif isinstance(b, ReasoningBlock):
            if b.signature:  # Anthropic replays only signed thinking
                content.append({"type": "thinking", "thinking": b.text, "signature": b.signature})
        elif isinstance(b, ToolCallBlock):
            content.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        elif isinstance(b, ToolResultBlock):
            inner = _anthropic_content(b.blocks) or [{"type": "text", "text": "(no output)"}]
            content.append(
                {
                    "type": "tool_result",
                    "tool_use_id": b.tool_call_id,
                    "content": inner,
                    "is_error": b.is_error,
                }
            )
    return content


def _anthropic(message: Message) -> dict[str, Any]:
    content = _anthropic_content(message.blocks)
    if not content and message.role == "user":
        content = [{"type": "text", "text": "(no output)"}]
    return {"role": message.role, "content": content}


# ------------------------------------------------------------- back to ORS


def to_ors_messages(messages: Iterable[Any]) -> list[Message]:
    """OpenAI chat, Anthropic or ORS messages (dicts or objects) as ORS Messages.

    Each message's format is recognised on its own: ``blocks`` (ORS), a
    ``tool`` role or ``tool_calls``/``image_url`` (OpenAI), ``tool_use``/
    ``tool_result``/``image`` source blocks (Anthropic). OpenAI ``tool``
    messages become ``tool_result`` blocks of a user turn, and consecutive
    user turns merge, results first (ORS and Anthropic placement). Images given
    by URL rather than base64 data become a text note. Raises ``ValueError``
    naming the message that cannot be read.
    """
    out: list[Message] = []
    for i, raw in enumerate(messages):
        try:
            message = _to_ors(raw)
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"message {i} cannot be read as a conversation turn: {exc}") from None
        if out and message.role == "user" and out[-1].role == "user":
            previous = out.pop()
            both: list[MessageBlock] = [*previous.blocks, *message.blocks]
            merged: list[MessageBlock] = [b for b in both if b.type == "tool_result"]
            merged += [b for b in both if b.type != "tool_result"]
            message = Message(role="user", blocks=merged)
        out.append(message)
    return out


def _to_ors(raw: Any) -> Message:
    if isinstance(raw, Message):
        return raw
    item = _plain(raw)
    if not isinstance(item, Mapping):
        raise TypeError(f"expected a message dict, got {type(raw).__name__}")
    if "blocks" in item:
        return parse(Message, dict(item), what="ORS message")
    role = item.get("role")
    if role == "tool":
        result = ToolResultBlock(
            tool_call_id=str(item["tool_call_id"]), blocks=_blocks_from(item.get("content"))
        )
        return Message(role="user", blocks=[result])
    if role == "developer":
        role = "system"
    if role not in ("system", "user", "assistant"):
        raise ValueError(f"unknown role {role!r}")
    blocks: list[MessageBlock] = []
    content = item.get("content")
    if isinstance(content, str):
        if content:
            blocks.append(TextBlock(text=content))
    elif isinstance(content, list | tuple):
        for part in map(_plain, content):
            blocks.extend(_part_to_blocks(part))
    elif content is not None:
        raise TypeError(f"content must be a str or a list, got {type(content).__name__}")
    if role == "assistant":
        for call in item.get("tool_calls") or ():
            call = _plain(call)
            fn = call.get("function") or {}
            arguments = fn.get("arguments")
            detail = None
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments) if arguments.strip() else {}
                except ValueError:
                    detail, arguments = {"raw_arguments": arguments}, {}
            if not isinstance(arguments, Mapping):
                detail, arguments = {"raw_arguments": arguments}, {}
            blocks.append(
                ToolCallBlock(id=str(call.get("id")), name=str(fn.get("name")),
                              input=dict(arguments), detail=detail)
            )
    return Message(role=role, blocks=blocks)


def _part_to_blocks(part: Any) -> list[MessageBlock]:
    if isinstance(part, str):
        return [TextBlock(text=part)]
    if not isinstance(part, Mapping):
        raise TypeError(f"content part must be a dict, got {type(part).__name__}")
    kind = part.get("type")
    if kind in _TEXT_TYPES:
        return [TextBlock(text=str(part.get("text") or ""))]
    if kind in ("image_url", "input_image"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, Mapping) else url
        return [_image_from_url(str(url))]
    if kind == "image":
        source = part.get("source")
        if isinstance(source, Mapping) and source.get("type") == "base64":
            return [ImageBlock(data=str(source["data"]),
                               mimeType=str(source.get("media_type") or "image/png"))]
        if isinstance(source, Mapping) and source.get("url"):
            return [_image_from_url(str(source["url"]))]
        return [parse(ImageBlock, dict(part), what="image block")]
    if kind == "thinking":
        thought = str(part.get("thinking") or "")
        return [ReasoningBlock(text=thought, signature=part.get("signature"))]
    if kind == "reasoning":
        return [ReasoningBlock(text=_reasoning_text(part), signature=part.get("signature"))]
    if kind == "redacted_thinking":
        return []
    if kind in ("tool_use", "tool_call"):
        return [ToolCallBlock(id=str(part["id"]), name=str(part["name"]),
                              input=dict(part.get("input") or {}))]
    if kind == "tool_result":
        return [
            ToolResultBlock(
                tool_call_id=str(part.get("tool_use_id") or part.get("tool_call_id")),
                blocks=_blocks_from(part.get("content", part.get("blocks"))),
                is_error=bool(part.get("is_error", False)),
            )
        ]
    raise ValueError(f"unknown content part type {kind!r}")


def _blocks_from(content: Any) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)]
    out: list[Block] = []
    for part in map(_plain, content):
        for b in _part_to_blocks(part):
            if isinstance(b, TextBlock | ImageBlock):
                out.append(b)
    return out


def _image_from_url(url: str) -> TextBlock | ImageBlock:
    if url.startswith("data:") and "," in url:
        header, _, data = url.partition(",")
        params = header[5:].split(";")
        if "base64" in params[1:]:
            return ImageBlock(data=data, mimeType=params[0] or "image/png")
    return TextBlock(text=f"[image at {url[:200]}]")
