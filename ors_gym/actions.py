"""Agent actions -> tool calls.

An ORS agent acts only through tool calls. :func:`parse_action` accepts what
agents and model clients actually produce and returns an :class:`AssistantTurn`,
the one record of a parsed turn from a model family's parser to the env's step:

- a ``str``: a plain message, or text carrying tool calls as JSON (``{"name": ...,
  "arguments": {...}}``, a list of them, whole, fenced in a code block or embedded in
  prose) or in ``<tool_call>...</tool_call>`` tags (Hermes/Qwen; other model families'
  formats: :func:`ors_gym.families.parse_text`);
- a ``dict``: ``{"tool_calls": [...], "message": "..."}`` whose calls may be in
  the generic shape or as OpenAI chat-completions, Anthropic ``tool_use`` or
  OpenAI Responses ``function_call`` items; or one bare call dict;
- a ``list``/``tuple`` of call dicts or :class:`ToolCall` objects; an :class:`AssistantTurn`
  (read already, by a model family's parser or a model client's output reader).

Two kinds of failure are kept apart. A malformed action *structure* is a
programming error and raises :class:`~ors_gym.errors.OrsActionError`. A tool
call the model wrote badly (invalid JSON, arguments that are not an object) is
an agent mistake: it lands in :attr:`AssistantTurn.errors` so the environment
can show it to the agent as an observation.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ors_gym._json import JSON_SCALARS, json_type, jsonable_object
from ors_gym.errors import OrsActionError
from ors_gym.protocol import ReasoningBlock

__all__ = ["AssistantTurn", "ToolCall", "call_id", "parse_action"]

_VALID_SHAPE = (
    'Valid actions: a str message; {"tool_calls": [{"name": "tool", "arguments": {...}}], '
    '"message": "..."} (both keys optional); one {"name": "tool", "arguments": {...}}; '
    "or a list of such calls (ToolCall objects work too). Calls may also be OpenAI "
    "chat-completions, Anthropic tool_use or OpenAI Responses function_call items."
)
_HOW_TO_WRITE = 'Write tool calls as {"name": ..., "arguments": {...}}'
_ARG_KEYS = ("arguments", "input", "parameters")
_TOP_KEYS = frozenset({"tool_calls", "message"})
_CALL_TYPES = ("function", "tool_use", "function_call")  # OpenAI chat, Anthropic, Responses

_TAG_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)
_FENCE_RE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)
# Where a call can start: an object with a key, or a list of such objects.
_START_RE = re.compile(r'\{\s*"|\[\s*\{\s*"')
_SCAN_BUDGET = 2_000_000  # characters of failed decoding allowed per text, plus 20 per char
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ToolCall:
    """One tool invocation: the tool's ``name`` and its JSON ``arguments``."""

    name: str
    arguments: dict[str, Any]
    id: str | None = None  # the model's call id when the format carries one


@dataclass(frozen=True)
class AssistantTurn:
    """One assistant turn as read: its tool calls, free text, notes on unparseable calls
    and reasoning. The same record goes from a model family's parser (or a model
    client's output) to the env's step, which runs its calls as they are; the calls'
    ids come back in the step's records (``info["calls"][i]["id"]``)."""

    tool_calls: tuple[ToolCall, ...]
    text: str  # the free text of the turn ("" if none): calls and reasoning removed
    errors: tuple[str, ...] = ()  # agent-facing notes for calls that could not be parsed
    reasoning: tuple[ReasoningBlock, ...] = ()  # kept off the env, kept in the conversation

    def numbered(self, step: int) -> AssistantTurn:
        """The turn with an id on every call (:func:`call_id` where the model gave none);
        the turn itself when every call has one."""
        ided = list(self.tool_calls)
        changed = False
        for i, call in enumerate(ided):
            if call.id is None:
                ided[i] = _tool_call(call.name, call.arguments, f"call_{step}_{i}")
                changed = True
        if not changed:
            return self
        turn = _new(AssistantTurn)  # filled in place: a step's hot path, as in _parse_calls
        fields = turn.__dict__
        fields.update(self.__dict__)
        fields["tool_calls"] = tuple(ided)
        return turn


def call_id(step: int, index: int) -> str:
    """The id given to call ``index`` of step ``step`` when the model gave none."""
    return f"call_{step}_{index}"


def parse_action(action: Any) -> AssistantTurn:
    """Parse one agent action (see the module docstring for the accepted shapes).

    Raises :class:`OrsActionError` for a structurally invalid action and
    nothing else; badly written tool calls become entries of ``errors``.
    """
    if type(action) is AssistantTurn:  # read already, by a model family's parser
        return action
    try:
        if type(action) is dict and len(action) == 1:
            calls = action.get("tool_calls")
            if type(calls) is list:  # the usual {"tool_calls": [...]}, without the key checks
                return _parse_calls(calls, "", where="action['tool_calls']")
        if isinstance(action, str):
            return _parse_text(action)
        if type(action) is dict or isinstance(action, Mapping):
            return _parse_mapping(action)
        if isinstance(action, list | tuple):
            return _parse_calls(action, "", where="action")
        if isinstance(action, ToolCall):
            return _parse_calls([action], "", where="action", indexed=False)
    except OrsActionError:
        raise
    except RecursionError:
        raise OrsActionError(f"action is nested too deeply to parse. {_VALID_SHAPE}") from None
    raise OrsActionError(
        f"action must be a str, dict, or list of tool-call dicts, got {_type_name(action)}. "
        f"{_VALID_SHAPE}"
    )


# ------------------------------------------------------------ structured input


def _parse_mapping(action: Mapping[Any, Any]) -> AssistantTurn:
    keys = set(action.keys())
    if keys <= _TOP_KEYS:
        message = action.get("message", "")
        if message is None:
            message = ""
        if not isinstance(message, str):
            raise OrsActionError(
                f'action "message" must be a str, got {_type_name(message)}. {_VALID_SHAPE}'
            )
        calls = action.get("tool_calls")
        if calls is None:
            return AssistantTurn((), message, ())
        if not isinstance(calls, list | tuple):
            raise OrsActionError(
                f'action "tool_calls" must be a list of call dicts, got {_type_name(calls)}. '
                f"{_VALID_SHAPE}"
            )
        return _parse_calls(calls, message, where="action['tool_calls']")
    if _looks_like_call(action):
        return _parse_calls([action], "", where="action", indexed=False)
    unknown = sorted(keys - _TOP_KEYS, key=repr)
    named = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), sorted(_TOP_KEYS), n=1, cutoff=0.6)
        named.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    raise OrsActionError(f"action dict has unknown key(s) {', '.join(named)}. {_VALID_SHAPE}")


def _looks_like_call(obj: Mapping[Any, Any]) -> bool:
    return "name" in obj or "function" in obj or obj.get("type") in _CALL_TYPES


def _parse_calls(calls: Any, message: str, *, where: str, indexed: bool = True) -> AssistantTurn:
    parsed: list[ToolCall] = []
    errors: list[str] = []
    for i, raw in enumerate(calls):
        if type(raw) is dict and len(raw) == 2:  # the usual {"name": ..., "arguments": {...}}
            name = raw.get("name")
            args = raw.get("arguments")
            if type(name) is str and name and type(args) is dict:
                for key, value in args.items():
                    if type(key) is not str or type(value) not in JSON_SCALARS:
                        break
                else:  # flat JSON arguments: what _normalize_call would make of them
                    parsed.append(_tool_call(name, dict(args)))
                    continue
        at = f"{where}[{i}]" if indexed else where
        result = _normalize_call(raw, mode="strict", where=at)
        if isinstance(result, ToolCall):
            parsed.append(result)
        elif isinstance(result, str):
            errors.append(result)
    action = _new(AssistantTurn)  # AssistantTurn(...) filled in place, as _tool_call does
    fields = action.__dict__
    fields["tool_calls"] = tuple(parsed)
    fields["text"] = message
    fields["errors"] = tuple(errors)
    fields["reasoning"] = ()
    return action


_new = object.__new__


def _tool_call(name: str, arguments: dict[str, Any], id: str | None = None) -> ToolCall:
    """``ToolCall(name, arguments)`` filled in place: the frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__``, a cost on every step."""
    call = _new(ToolCall)
    fields = call.__dict__
    fields["name"] = name
    fields["arguments"] = arguments
    fields["id"] = id
    return call


def _call_fields(obj: Mapping[Any, Any]) -> tuple[Any, bool, Any, Any, str]:
    """(name, has-arguments, arguments, id, arguments key) for any supported call shape."""
    kind = obj.get("type")
    fn = obj.get("function")
    if fn is not None and isinstance(fn, Mapping) and (kind == "function" or "name" not in obj):
        key = next((k for k in _ARG_KEYS if k in fn), "arguments")
        return fn.get("name"), key in fn, fn.get(key), obj.get("id"), key
    if kind == "tool_use":
        return obj.get("name"), "input" in obj, obj.get("input"), obj.get("id"), "input"
    call_id = obj.get("call_id") if kind == "function_call" else None
    call_id = call_id if call_id is not None else obj.get("id", obj.get("call_id"))
    key = next((k for k in _ARG_KEYS if k in obj), "arguments")
    return obj.get("name"), key in obj, obj.get(key), call_id, key


def _normalize_call(obj: Any, *, mode: str, where: str) -> ToolCall | str | None:
    """One call dict -> ToolCall, an agent-facing error string, or None (not a call).

    ``mode`` is ``strict`` (Python input: structural faults raise), ``tag``
    (a ``<tool_call>`` body: every fault is an agent error) or ``scan`` (JSON
    found in prose: anything that is not clearly a call is ignored).
    """
    if type(obj) is dict:  # the usual case, without the ABC checks below
        pass
    elif isinstance(obj, ToolCall) and mode == "strict":
        obj = {"name": obj.name, "arguments": obj.arguments, "id": obj.id}
    elif not isinstance(obj, Mapping):
        if mode == "strict":
            raise OrsActionError(
                f"{where} must be a tool-call dict, got {_type_name(obj)}. {_VALID_SHAPE}"
            )
        if mode == "tag":
            return _agent_error(f"expected a JSON object, got {json_type(obj)}")
        return None
    name, has_args, args, call_id, key = _call_fields(obj)
    if not isinstance(name, str) or not name:
        if mode == "strict":
            raise OrsActionError(
                f"{where} has no tool name: it needs a non-empty str 'name' "
                f"(got keys {sorted(map(str, obj.keys()))}). {_VALID_SHAPE}"
            )
        return _agent_error('the call has no "name" string') if mode == "tag" else None
    if call_id is not None and not isinstance(call_id, str):
        if mode == "strict":
            raise OrsActionError(f"{where} id must be a str, got {_type_name(call_id)}.")
        call_id = None
    if mode == "scan" and not (has_args and isinstance(args, Mapping | str)):
        return None
    if args is None:
        return ToolCall(name, {}, call_id)
    if isinstance(args, str):
        if not args.strip():
            return ToolCall(name, {}, call_id)
        try:
            decoded = json.loads(args)
        except (ValueError, RecursionError) as exc:
            if mode == "scan" and key != "arguments":
                return None
            return _agent_error(f"the arguments of {name!r} are not valid JSON ({exc})")
        if not isinstance(decoded, dict):
            if mode == "scan" and key != "arguments":
                return None
            return _agent_error(
                f"the arguments of {name!r} must be a JSON object, got {json_type(decoded)}"
            )
        return ToolCall(name, decoded, call_id)
    if type(args) is dict or isinstance(args, Mapping):
        if mode == "strict":
            return ToolCall(name, jsonable_object(args, f"{where} arguments"), call_id)
        return ToolCall(name, dict(args), call_id)
    if mode == "strict":
        raise OrsActionError(
            f"{where} arguments of {name!r} must be a dict or a JSON-object string, "
            f"got {_type_name(args)}. {_VALID_SHAPE}"
        )
    return _agent_error(f"the arguments of {name!r} must be a JSON object, got {json_type(args)}")


# ------------------------------------------------------------------ text input


def _parse_text(text: str) -> AssistantTurn:
    """Tool calls written in model text: ``<tool_call>`` tags first, else JSON."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    spans: list[tuple[int, int]] = []
    if "<tool_call>" in text:
        for match in _TAG_RE.finditer(text):
            spans.append(match.span())
            _parse_tag_body(match.group(1), calls, errors)
    elif '"name"' in text:  # every JSON tool call has a "name" key
        _scan_json(text, calls, errors, spans)
    if not spans:
        return AssistantTurn((), text.strip(), ())
    return AssistantTurn(tuple(calls), _cut(text, spans).strip(), tuple(errors))


def _parse_tag_body(body: str, calls: list[ToolCall], errors: list[str]) -> None:
    body = body.strip()
    fenced = _FENCE_RE.fullmatch(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        errors.append(_agent_error("the <tool_call> tag is empty"))
        return
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        errors.append(_agent_error(f"the <tool_call> body is not valid JSON ({exc})"))
        return
    items = value if isinstance(value, list) else [value]
    if not items:
        errors.append(_agent_error("the <tool_call> tag holds an empty list"))
    for item in items:
        result = _normalize_call(item, mode="tag", where="<tool_call>")
        if isinstance(result, ToolCall):
            calls.append(result)
        elif isinstance(result, str):
            errors.append(result)


def _scan_json(
    text: str, calls: list[ToolCall], errors: list[str], spans: list[tuple[int, int]]
) -> None:
    """Find tool-call JSON in ``text``: fenced blocks whole, then objects in prose."""
    for fence in _FENCE_RE.finditer(text):
        body = fence.group(1).strip()
        found = _calls_in(body) if body[:1] in "{[" and body else None
        if found is None:
            found = _broken_attempt(body)
        if found is not None:
            spans.append(fence.span())
            _collect(found, calls, errors)
    stripped = text.strip()
    if not spans and stripped[:1] in ("{", "["):
        found = _calls_in(stripped)
        if found is None:
            found = _broken_attempt(stripped)
        if found is not None:
            spans.append((0, len(text)))
            _collect(found, calls, errors)
            return
    pos = 0
    taken = sorted(spans)
    budget = _SCAN_BUDGET + 20 * len(text)  # bounds the work on adversarial text
    while budget > 0:
        match = _START_RE.search(text, pos)
        if match is None:
            break
        pos = match.start()
        inside = next((end for start, end in taken if start <= pos < end), None)
        if inside is not None:
            pos = inside
            continue
        value, end, cost = _decode_at(text, pos)
        if end < 0:
            budget -= cost
            pos += 1
            continue
        found = _as_calls(value)
        if found is not None:
            spans.append((pos, end))
            _collect(found, calls, errors)
        pos = end
    spans.sort()


def _decode_at(text: str, pos: int) -> tuple[Any, int, int]:
    """Decode the JSON value starting at ``pos``: (value, end, 0) or (None, -1, cost).

    Decodes a growing window rather than the whole text, so a failure close
    to ``pos`` costs little (a JSON error message counts lines up to its
    position, which is quadratic over many candidates in a long text).
    """
    window = 4096
    while True:
        chunk = text[pos : pos + window]
        try:
            value, end = _DECODER.raw_decode(chunk)
        except RecursionError:
            return None, -1, len(chunk)
        except json.JSONDecodeError as err:
            cut_short = err.pos >= len(chunk) - 1 or err.msg.startswith("Unterminated string")
            if cut_short and pos + window < len(text):
                window *= 4
                continue
            return None, -1, len(chunk)
        return value, pos + end, 0


def _calls_in(body: str) -> list[ToolCall | str] | None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return _as_calls(value)


def _as_calls(value: Any) -> list[ToolCall | str] | None:
    """The calls a decoded JSON value holds (one object or a list), or None if not calls."""
    items = value if isinstance(value, list) else [value]
    if not items:
        return None
    out: list[ToolCall | str] = []
    for item in items:
        result = _normalize_call(item, mode="scan", where="text")
        if result is None:
            return None
        out.append(result)
    return out


def _broken_attempt(body: str) -> list[ToolCall | str] | None:
    """An agent error when ``body`` is clearly a tool call written as invalid JSON."""
    if body[:1] not in ("{", "[") or '"name"' not in body:
        return None
    if not any(f'"{key}"' in body for key in _ARG_KEYS):
        return None
    try:
        _DECODER.raw_decode(body)  # trailing text is fine: the scan handles it
    except (ValueError, RecursionError) as exc:
        return [_agent_error(f"the tool call is not valid JSON ({exc})")]
    return None


def _collect(found: list[ToolCall | str], calls: list[ToolCall], errors: list[str]) -> None:
    for item in found:
        if isinstance(item, ToolCall):
            calls.append(item)
        else:
            errors.append(item)


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without the (sorted, disjoint) ``spans``, tidying the seams."""
    out = ""
    pos = 0
    for start, end in sorted(spans):
        if start >= pos:
            out = _join(out, text[pos:start])
            pos = end
    return _join(out, text[pos:])


def _join(left: str, right: str) -> str:
    """Concatenate the pieces around a removed call without doubled blanks at the seam."""
    core_left, core_right = left.rstrip(" \t\n"), right.lstrip(" \t\n")
    gap_left, gap_right = left[len(core_left) :], right[: len(right) - len(core_right)]
    newlines = min(gap_left.count("\n") + gap_right.count("\n"), 2)
    if newlines:
        gap = "\n" * newlines
    else:
        gap = " " if gap_left or gap_right else ""
    return core_left + gap + core_right


# ----------------------------------------------------------------- messages


def _agent_error(reason: str) -> str:
    """The note the agent sees for a tool call it wrote badly."""
    return f"could not parse tool call: {reason}. {_HOW_TO_WRITE}"


def _type_name(value: Any) -> str:
    return type(value).__name__
