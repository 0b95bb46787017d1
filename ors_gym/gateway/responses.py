"""The OpenAI Responses wire: ``POST /v1/responses``, read into the turn a Chat request is.

A Responses body is rewritten as the Chat Completions body it stands for (``instructions``
and ``developer`` messages as system messages; each run of ``reasoning``, assistant
``message`` and ``function_call`` items as one assistant turn; ``function_call_output`` as
a tool message; function tools, and the tools of a ``namespace`` flattened as
``<namespace>__<name>``) and read by :func:`~ors_gym.gateway.requests.read_request`, so a
turn is planned, sampled and recorded exactly as on Chat, and the same episode gives the
same trajectory. The reply's items: a ``reasoning`` item (its text only in
``encrypted_content``, an opaque handle of :mod:`ors_gym.gateway.handles`, and in
``summary`` only when ``reasoning.summary`` asks), a ``message``, and one ``function_call``
per call (a flattened name answered as its ``namespace`` and bare name). Streamed, the
events the ``openai`` SDK assembles, ending with ``response.completed`` (status
``incomplete`` when the budget ran out), or ``response.failed`` for a turn that failed.
A response is kept for ``previous_response_id`` unless ``store`` is false, for as long as
its session is held. ``custom`` and built-in tools, a forced ``tool_choice``, structured
output and server-side conversations are refused (400) in OpenAI's error shape.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ors_gym.formats.shapes import as_plain
from ors_gym.gateway.errors import GatewayError, error_body
from ors_gym.gateway.gateway import Gateway
from ors_gym.gateway.handles import seal, unseal
from ors_gym.gateway.replies import Reply, openai_completion
from ors_gym.gateway.requests import TurnRequest, read_request
from ors_gym.gateway.session import CaptureSession

logger = logging.getLogger("ors_gym")

__all__ = ["ResponsesRequest", "read_responses", "response_events", "response_object",
           "responses_turn"]

#: How to stop a harness offering a tool the gateway cannot serve, by tool type.
_TURN_OFF = {
    "custom": "offer it as a function tool instead (Codex: `[features] "
              "apply_patch_freeform = false` in config.toml)",
    "web_search": "turn web search off in the client (Codex: `web_search = \"disabled\"` "
                  "in config.toml)",
}
#: Assistant-side input items, gathered into one assistant turn while they run on.
_ASSISTANT_ITEMS = ("reasoning", "function_call")
#: Each held session's stored responses (session id -> response id -> its Chat
#: conversation), dropped with the session.
_STORED: dict[str, dict[str, list[dict[str, Any]]]] = {}


@dataclass(frozen=True)
class ResponsesRequest:
    """A Responses request read: the turn as Chat reads it, the conversation it stands for
    (Chat messages, without the instructions), and what the reply must echo."""

    turn: TurnRequest
    history: list[dict[str, Any]]
    body: Mapping[str, Any]
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat -> (ns, name)

    @property
    def summary(self) -> bool:
        """Whether the reasoning is asked for in clear (``reasoning.summary``)."""
        reasoning = self.body.get("reasoning")
        return isinstance(reasoning, Mapping) and reasoning.get("summary") not in (None, "")

    @property
    def store(self) -> bool:
        return self.body.get("store") is not False


def read_responses(body: Any, session: CaptureSession) -> ResponsesRequest:
    """A Responses body as the Chat turn it stands for; a :class:`GatewayError` (400)
    naming the field the gateway cannot serve."""
    if not isinstance(body, Mapping):
        raise GatewayError(400, "the request body must be a JSON object")
    for name, why in (("conversation", "server-side conversations are not kept: send the "
                                        "history as 'input', or use previous_response_id"),
                      ("prompt", "stored prompts are not kept: send 'instructions'"),
                      ("background", "background responses are not served")):
        if body.get(name) not in (None, False, ""):
            raise GatewayError(400, f"'{name}' is not supported: {why}", param=name)
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") not in (None, "text"):
        raise GatewayError(400, f"text.format type {fmt.get('type')!r} is not supported: the "
                                "gateway samples the model's own text, unconstrained",
                           param="text.format")
    choice = body.get("tool_choice")
    if choice not in (None, "auto"):
        raise GatewayError(400, f"tool_choice={json.dumps(choice)} is not supported: the "
                                "gateway samples the model's own turn, so only 'auto' is "
                                "served", param="tool_choice")
    tools, namespaces = _tools(body.get("tools") or ())
    flat = {(ns, name): f for f, (ns, name) in namespaces.items()}
    history: list[dict[str, Any]] = []
    previous = body.get("previous_response_id")
    if previous is not None:
        stored = _STORED.get(session.id, {}).get(str(previous))
        if stored is None:
            raise GatewayError(400, f"previous_response_id {previous!r} is not a response this "
                                    "session stored: send the whole history as 'input' (a "
                                    "response sent with store=false is not kept)",
                               code="previous_response_not_found",
                               param="previous_response_id")
        history = list(stored)
    history += _input(body.get("input"), flat)
    head: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        head = [{"role": "system", "content": instructions}]
    elif instructions not in (None, "", []):
        raise GatewayError(400, "'instructions' must be a string", param="instructions")
    asked = body.get("reasoning")
    effort = asked.get("effort") if isinstance(asked, Mapping) else None
    chat = {"model": body.get("model"), "messages": head + history, "tools": tools,
            "reasoning_effort": effort,
            "max_completion_tokens": body.get("max_output_tokens"),
            "temperature": body.get("temperature"), "top_p": body.get("top_p"),
            "stream": bool(body.get("stream"))}
    try:
        turn = read_request(chat, "openai")
    except GatewayError as exc:  # said with the Responses fields' names
        param = exc.param or ""
        param = "input" if param.startswith("messages") else param.replace(
            "max_tokens", "max_output_tokens")
        param = param.replace("reasoning_effort", "reasoning.effort")
        message = exc.message.replace("max_tokens", "max_output_tokens").replace(
            "reasoning_effort", "reasoning.effort").replace(
            "'messages'", "'input'").replace("messages[", "the conversation's message [")
        raise GatewayError(exc.status, message, code=exc.code, param=param or None) from None
    return ResponsesRequest(turn, history, body, namespaces)


def _tools(raw: Any) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """Responses tools as Chat function tools, and each flattened namespace tool's origin."""
    if not isinstance(raw, list | tuple):
        raise GatewayError(400, "'tools' must be a list of tools", param="tools")
    tools: list[dict[str, Any]] = []
    namespaces: dict[str, tuple[str, str]] = {}

    def function(tool: Mapping[str, Any], name: str) -> dict[str, Any]:
        return {"type": "function", "function": {
            "name": name, "description": tool.get("description"),
            "parameters": tool.get("parameters")}}

    for i, tool in enumerate(raw):
        tool = as_plain(tool)
        kind = tool.get("type") if isinstance(tool, Mapping) else type(tool).__name__
        if kind == "function" and isinstance(tool, Mapping) and tool.get("name"):
            tools.append(function(tool, str(tool["name"])))
        elif kind == "namespace" and isinstance(tool, Mapping) and tool.get("name"):
            ns = str(tool["name"])
            for j, inner in enumerate(tool.get("tools") or ()):
                inner = as_plain(inner)
                inner_kind = inner.get("type") if isinstance(inner, Mapping) else None
                if inner_kind != "function" or not inner.get("name"):
                    raise _refused(f"tools[{i}].tools[{j}]", inner_kind, inner)
                flat = f"{ns}__{inner['name']}"
                namespaces[flat] = (ns, str(inner["name"]))
                tools.append(function(inner, flat))
        else:
            raise _refused(f"tools[{i}]", kind, tool)
    return tools, namespaces


def _refused(where: str, kind: Any, tool: Any) -> GatewayError:
    name = tool.get("name") if isinstance(tool, Mapping) else None
    named = f" ({name})" if name else ""
    how = _TURN_OFF.get(str(kind), "turn it off in the client")
    return GatewayError(400, f"{where} has type {kind!r}{named}: the gateway serves function "
                             "tools and namespaces of them only, whose calls the model's "
                             f"template writes; {how}", code="unsupported_tool", param=where)


def _input(raw: Any, flat: Mapping[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Responses input as Chat messages: each run of assistant-side items one turn."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise GatewayError(400, "'input' must be a string or a list of input items",
                           param="input")
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None
    for i, item in enumerate(raw):
        item = as_plain(item)
        if not isinstance(item, Mapping):
            raise GatewayError(400, f"input[{i}] must be an object", param=f"input[{i}]")
        kind = item.get("type") or ("message" if "role" in item else None)
        role = item.get("role")
        if kind in _ASSISTANT_ITEMS or (kind == "message" and role == "assistant"):
            if turn is None:
                turn = {"role": "assistant", "content": None}
                out.append(turn)
            _add_to_turn(turn, kind, item, flat, i)
            continue
        turn = None
        if kind == "message" and role in ("user", "system", "developer"):
            out.append({"role": "system" if role == "developer" else role,
                        "content": _parts(item.get("content"), f"input[{i}].content")})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""),
                        "content": _parts(output, f"input[{i}].output")})
        else:
            what = f"role {role!r}" if kind == "message" else f"type {kind!r}"
            raise GatewayError(400, f"input[{i}] has {what}: the gateway reads messages "
                                    "(user, system, developer, assistant), reasoning, "
                                    "function_call and function_call_output items",
                               param=f"input[{i}]")
    return out


def _add_to_turn(turn: dict[str, Any], kind: str, item: Mapping[str, Any],
                 flat: Mapping[tuple[str, str], str], i: int) -> None:
    """One assistant-side item into the Chat assistant message being gathered."""
    if kind == "reasoning":
        text = unseal(item.get("encrypted_content"))
        if text is None:
            parts = item.get("content") or item.get("summary") or ()
            text = "\n".join(str(as_plain(p).get("text") or "") for p in parts
                             if isinstance(as_plain(p), Mapping)) or None
        if text:
            had = turn.get("reasoning_content")
            turn["reasoning_content"] = f"{had}\n{text}" if had else text
    elif kind == "function_call":
        name = str(item.get("name") or "")
        if item.get("namespace"):
            name = flat.get((str(item["namespace"]), name), f"{item['namespace']}__{name}")
        turn.setdefault("tool_calls", []).append({
            "id": str(item.get("call_id") or item.get("id") or ""), "type": "function",
            "function": {"name": name, "arguments": item.get("arguments") or "{}"}})
    else:
        said = _parts(item.get("content"), f"input[{i}].content")
        said = said if isinstance(said, str) else "".join(p["text"] for p in said)
        turn["content"] = (turn["content"] or "") + said


def _parts(content: Any, where: str) -> str | list[dict[str, Any]]:
    """Responses content (a string or parts) as Chat content."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise GatewayError(400, f"{where} must be a string or a list of content parts",
                           param=where)
    parts: list[dict[str, Any]] = []
    for part in content:
        part = as_plain(part)
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise GatewayError(400, f"{where} holds a part of type {kind!r}: the gateway reads "
                                    "input_text, output_text and input_image (by URL) parts",
                               param=where)
    return parts


# -- the reply ---------------------------------------------------------------------------
def _items(reply: Reply, request: ResponsesRequest) -> list[dict[str, Any]]:
    """The reply's output items, in the order the model wrote them."""
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        summary = ([{"type": "summary_text", "text": reply.reasoning}] if request.summary
                   else [])
        items.append({"type": "reasoning", "id": "rs_" + secrets.token_hex(12),
                      "summary": summary, "encrypted_content": seal(reply.reasoning)})
    if reply.turn.text:
        items.append({"type": "message", "id": "msg_" + secrets.token_hex(12),
                      "role": "assistant", "status": "completed", "content": [
                          {"type": "output_text", "text": reply.turn.text,
                           "annotations": [], "logprobs": []}]})
    for call in reply.calls:
        item = {"type": "function_call", "id": "fc_" + secrets.token_hex(12),
                "call_id": call["id"], "name": call["name"],
                "arguments": json.dumps(call["arguments"]), "status": "completed"}
        if call["name"] in request.namespaces:
            item["namespace"], item["name"] = request.namespaces[call["name"]]
        items.append(item)
    return items


def _skeleton(rid: str, request: ResponsesRequest, model: str) -> dict[str, Any]:
    """The response object's fields that do not depend on the sampled turn."""
    body = request.body
    asked = body.get("reasoning")
    reasoning: Mapping[str, Any] = asked if isinstance(asked, Mapping) else {}
    return {
        "id": rid, "object": "response", "created_at": int(time.time()),
        "status": "in_progress", "model": request.turn.model or model, "output": [],
        "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "metadata": body.get("metadata") or {},
        "max_output_tokens": body.get("max_output_tokens"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": request.store, "temperature": request.turn.temperature,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto",
        "tools": list(body.get("tools") or ()), "top_p": request.turn.top_p,
        "truncation": "disabled", "usage": None, "user": None,
    }


def response_object(reply: Reply, request: ResponsesRequest, rid: str,
                    items: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The finished ``response`` object for ``reply``."""
    out = _skeleton(rid, request, reply.model)
    cut = reply.finish_reason == "length"
    out.update(
        status="incomplete" if cut else "completed",
        incomplete_details={"reason": "max_output_tokens"} if cut else None,
        output=items if items is not None else _items(reply, request),
        usage={"input_tokens": reply.prompt_tokens,
               "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": reply.completion_tokens,
               "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": reply.prompt_tokens + reply.completion_tokens})
    return out


async def response_events(gateway: Gateway, session: CaptureSession,
                          request: ResponsesRequest, rid: str) -> AsyncIterator[str]:
    """The streamed response: ``response.created`` and ``response.in_progress`` at once, the
    turn, then each item's events and ``response.completed`` (or ``response.failed``)."""
    seq = 0

    def event(kind: str, **data: Any) -> str:
        nonlocal seq
        seq += 1
        data = {"type": kind, "sequence_number": seq - 1, **data}
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n"

    head = _skeleton(rid, request, gateway.model)
    yield event("response.created", response=head)
    yield event("response.in_progress", response=head)
    try:
        reply = await _turn(gateway, session, request)
    except GatewayError as exc:
        error = error_body(exc, "openai")["error"]
        yield event("response.failed", response={
            **head, "status": "failed", "error": {"code": exc.code or error["type"],
                                                  "message": exc.message}})
        return
    items = _items(reply, request)
    for i, item in enumerate(items):
        for chunk in _item_events(item, i):
            yield event(chunk.pop("type"), **chunk)
    _keep(session, request, reply, rid)
    yield event("response.completed", response=response_object(reply, request, rid, items))


def _item_events(item: dict[str, Any], i: int) -> list[dict[str, Any]]:
    """One output item's events, ``output_item.added`` to ``output_item.done``."""
    at = {"item_id": item["id"], "output_index": i}
    kind = item["type"]
    opened = dict(item)
    events: list[dict[str, Any]] = []
    if kind == "message":
        opened.update(content=[], status="in_progress")
        part = item["content"][0]
        text = part["text"]
        events += [
            {"type": "response.content_part.added", **at, "content_index": 0,
             "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", **at, "content_index": 0, "delta": text,
             "logprobs": []},
            {"type": "response.output_text.done", **at, "content_index": 0, "text": text,
             "logprobs": []},
            {"type": "response.content_part.done", **at, "content_index": 0, "part": part}]
    elif kind == "function_call":
        opened.update(arguments="", status="in_progress")
        events += [
            {"type": "response.function_call_arguments.delta", **at,
             "delta": item["arguments"]},
            {"type": "response.function_call_arguments.done", **at, "name": item["name"],
             "arguments": item["arguments"]}]
    else:
        opened.update(summary=[])
        for k, part in enumerate(item["summary"]):
            events += [
                {"type": "response.reasoning_summary_part.added", **at, "summary_index": k,
                 "part": {**part, "text": ""}},
                {"type": "response.reasoning_summary_text.delta", **at, "summary_index": k,
                 "delta": part["text"]},
                {"type": "response.reasoning_summary_text.done", **at, "summary_index": k,
                 "text": part["text"]},
                {"type": "response.reasoning_summary_part.done", **at, "summary_index": k,
                 "part": part}]
    return [{"type": "response.output_item.added", "output_index": i, "item": opened},
            *events, {"type": "response.output_item.done", "output_index": i, "item": item}]


async def _turn(gateway: Gateway, session: CaptureSession, request: ResponsesRequest) -> Reply:
    """The gateway's turn, an unexpected failure said as a 500 (logged)."""
    try:
        return await gateway.turn(session, request.turn)
    except GatewayError:
        raise
    except Exception as exc:  # a bug or a bridge's refusal
        logger.warning("gateway failed a turn: %s: %s", type(exc).__name__, exc)
        raise GatewayError(500, f"the gateway failed: {type(exc).__name__}: {exc}") from exc


def _keep(session: CaptureSession, request: ResponsesRequest, reply: Reply, rid: str) -> None:
    """Store the response's conversation for ``previous_response_id`` (unless store=false)."""
    if not request.store:
        return
    if session.id not in _STORED:
        _STORED[session.id] = {}
        weakref.finalize(session, _STORED.pop, session.id, None)
    message = openai_completion(reply)["choices"][0]["message"]
    _STORED[session.id][rid] = [*request.history, message]


async def responses_turn(gateway: Gateway, request: Request, key: str | None) -> Response:
    """``POST /v1/responses``: the session by URL or ``key``, one turn, the reply."""
    try:
        session = gateway.find(request.path_params.get("sid"), key)
        try:
            body = json.loads(await request.body())
        except ValueError as exc:
            raise GatewayError(400, f"the request body is not JSON: {exc}") from None
        read = read_responses(body, session)
        rid = "resp_" + secrets.token_hex(12)
        if read.turn.stream:
            return StreamingResponse(response_events(gateway, session, read, rid),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        reply = await _turn(gateway, session, read)
    except GatewayError as exc:
        return JSONResponse(error_body(exc, "openai"), status_code=exc.status)
    _keep(session, read, reply, rid)
    return JSONResponse(response_object(reply, read, rid))
