"""Parsers for the formats renderers does not read: DeepSeek V3.1 and Llama 3's
``<|python_tag|>`` / several JSON calls.

They report what they found as :class:`Reply` records with the statuses
renderers uses (``ok``, ``invalid_json``, ``unclosed_block``...), so every
family's errors are worded by the same code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ors_gym.families._formats import DS

_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```\s*\Z", re.DOTALL)
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class Attempt:
    """One call the model tried to write, with renderers' parse status."""

    status: str
    name: str | None
    arguments: Any
    raw: str
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    content: str
    reasoning: str | None
    attempts: tuple[Attempt, ...]


def _think(text: str) -> tuple[str | None, str, bool]:
    """(reasoning, rest, closed) of a reply that may open with ``<think>``."""
    head = text.lstrip()
    if not head.startswith("<think>"):
        return None, text, True
    reasoning, closed, rest = head[len("<think>") :].partition("</think>")
    return reasoning.strip(), rest, bool(closed)


def parse_deepseek_v31(text: str) -> Reply:
    """DeepSeek V3.1's calls: ``NAME``, the tool-sep token, JSON arguments, between
    the tool-call begin and end tokens of a tool-calls section (see
    :func:`~ors_gym.families.call_example`); reasoning in ``<think>...</think>``."""
    reasoning, rest, closed = _think(text)
    if not closed:
        return Reply("", reasoning, ())
    start = rest.find(DS.CALLS_BEGIN)
    if start == -1:
        return Reply(rest.strip(), reasoning or None, ())
    section = rest[start + len(DS.CALLS_BEGIN) :]
    section = section.partition(DS.CALLS_END)[0]
    attempts: list[Attempt] = []
    for block in section.split(DS.CALL_BEGIN)[1:]:
        body, ended, _ = block.partition(DS.CALL_END)
        if not ended:
            attempts.append(Attempt("unclosed_block", None, None, body))
            break
        attempts.append(_deepseek_call(body))
    return Reply(rest[:start].strip(), reasoning or None, tuple(attempts))


def _deepseek_call(body: str) -> Attempt:
    name, sep, args = body.partition(DS.SEP)
    if not sep:
        return Attempt("malformed_structure", None, None, body)
    name, args = name.strip(), args.strip()
    if name == "function" and "\n" in args:  # DeepSeek V3's layout: function<sep>NAME\n```json
        name, _, args = args.partition("\n")
        name, args = name.strip(), args.strip()
    fenced = _FENCE.match(args)
    if fenced:
        args = fenced.group(1)
    if not name:
        return Attempt("missing_name", None, None, body)
    try:
        arguments = json.loads(args) if args else {}
    except (ValueError, RecursionError):
        return Attempt("invalid_json", name, args, args)
    return Attempt("ok", name, arguments, args)


def parse_llama3(text: str) -> Reply:
    """Llama 3's JSON calls: ``{"name": ..., "parameters": {...}}``, the whole
    reply or after ``<|python_tag|>``, several separated by ``;``."""
    header = text.rfind("<|end_header_id|>")
    if header != -1:
        text = text[header + len("<|end_header_id|>") :]
    content, tag, body = text.partition("<|python_tag|>")
    if not tag:
        content, body = "", text
    attempts = _json_calls(body.strip())
    if attempts is None:
        if tag:  # a python_tag promises a call
            return Reply(content.strip(), None, (Attempt("malformed_structure", None, None, body),))
        return Reply(text.strip(), None, ())
    return Reply(content.strip(), None, attempts)


def _json_calls(body: str) -> tuple[Attempt, ...] | None:
    """The calls ``body`` consists of, or None if it is not calls."""
    if not body.startswith("{"):
        return None
    attempts: list[Attempt] = []
    pos = 0
    while pos < len(body):
        try:
            value, end = _DECODER.raw_decode(body, pos)
        except (ValueError, RecursionError):
            if attempts or '"name"' in body[pos:]:  # a call, badly written
                attempts.append(Attempt("invalid_json", _name_in(body[pos:]), None, body[pos:]))
                return tuple(attempts)
            return None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        arguments = value.get("parameters", value.get("arguments", {}))
        raw = body[pos:end]
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                attempts.append(Attempt("invalid_json", value["name"], arguments, raw))
                arguments = None
        if arguments is not None:
            attempts.append(Attempt("ok" if value["name"] else "missing_name", value["name"],
                                    arguments, raw))  # fmt: skip
        pos = end
        while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):
            pos += 1
        if pos < len(body) and body[pos] != "{":
            return None  # prose after the JSON: a plain reply
    return tuple(attempts)


def _name_in(raw: str) -> str | None:
    match = re.search(r'"name"\s*:\s*"([^"]+)"', raw)
    return match.group(1) if match else None
