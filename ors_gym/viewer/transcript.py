"""One recorded episode as an HTML transcript (escaped: trajectory text is untrusted).

The transcript shows, in order: the prompt (text and images), then per step
the assistant's message and reasoning, each tool call with its arguments,
each result (ok or error, its reward, its text and images), calls that did
not run and why, feedback, and the step's reward; then the final reward and
why the episode ended. Images recorded as base64 are shown inline (``data:``
URLs); images recorded as summaries show their size only.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

__all__ = ["ended_why", "episode_html", "has_error"]

_IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def _e(value: Any) -> str:
    """Escape ``value`` (any type) for HTML text or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, default=str)


def ended_why(record: Mapping[str, Any]) -> str:
    """One line saying how the episode ended (terminated, truncated and why, or an error)."""
    error = record.get("error")
    if isinstance(error, Mapping):
        return f"error: {error.get('reason')}"
    steps = record.get("steps") or []
    last = steps[-1] if steps else {}
    if record.get("terminated"):
        return f"terminated ({last.get('termination_reason') or 'the environment finished it'})"
    if record.get("truncated"):
        return f"truncated ({last.get('truncation_reason') or 'step limit'})"
    return f"not finished (ended by {record.get('ended_by') or 'close'})"


def has_error(record: Mapping[str, Any]) -> bool:
    """Whether the episode hit an error: an endpoint/env failure, a truncation, an agent mistake."""
    if record.get("error"):
        return True
    return any(s.get("error_reason") or s.get("truncation_reason")
               for s in record.get("steps") or ())


def _image(item: Mapping[str, Any]) -> str:
    mime = str(item.get("mime") or "image/png")
    shape = item.get("shape")
    size = f"{shape[1]}x{shape[0]}" if isinstance(shape, list) and len(shape) >= 2 else "?"
    data = item.get("data")
    if isinstance(data, str) and mime in _IMAGE_MIMES:
        raw = data.split(",", 1)[-1] if data.startswith("data:") else data
        try:
            base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return f'<span class="note">[{_e(mime)} image {_e(size)}: not valid base64]</span>'
        return (f'<img class="frame" alt="{_e(mime)} {_e(size)}" '
                f'src="data:{_e(mime)};base64,{_e(raw)}">')
    return f'<span class="note">[{_e(mime)} image {_e(size)}, not recorded]</span>'


def _content(items: Iterable[Any]) -> str:
    parts = []
    for item in items or ():
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "text":
            parts.append(f'<pre class="text">{_e(item.get("text"))}</pre>')
        elif item.get("type") == "image":
            parts.append(_image(item))
        else:
            parts.append(f'<span class="note">[{_e(item.get("type"))} block]</span>')
    return "".join(parts)


def _reward(value: Any) -> str:
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return "?"


def _msg(kind: str, role: str, body: str) -> str:
    """A message box of class ``msg kind``, headed by ``role``; both arguments are HTML."""
    return f'<div class="msg {kind}"><div class="role">{role}</div>{body}</div>'


def _step(step: Mapping[str, Any]) -> str:
    out = [f'<div class="step"><div class="step-head">step {_e(step.get("step"))}'
           f' &middot; reward <b>{_e(_reward(step.get("reward")))}</b>']
    if step.get("error_reason"):
        out.append(f' &middot; <span class="bad">{_e(step["error_reason"])}</span>')
    if step.get("usage"):
        usage = step["usage"]
        out.append(f' &middot; <span class="dim">tokens {_e(usage.get("prompt_tokens"))} in / '
                   f'{_e(usage.get("completion_tokens"))} out</span>')
    out.append("</div>")
    for text in step.get("reasoning") or ():
        out.append(_msg("reasoning", "reasoning", f'<pre class="text">{_e(text)}</pre>'))
    if step.get("message"):
        out.append(_msg("assistant", "assistant", f'<pre class="text">{_e(step["message"])}</pre>'))
    for error in step.get("parse_errors") or ():
        out.append(f'<div class="msg bad">parse error: {_e(error)}</div>')
    results = {r.get("tool_call_id"): r for r in step.get("results") or ()}
    for call in step.get("tool_calls") or ():
        role = (f'tool call <code>{_e(call.get("name"))}</code> '
                f'<span class="dim">{_e(call.get("id"))}</span>')
        args = f'<pre class="args">{_e(_json(call.get("arguments")))}</pre>'
        out.append(_msg("call", role, args))
        result = results.pop(call.get("id"), None)
        if result is not None:
            out.append(_result(result))
    for result in results.values():  # the terminal tool run for a plain answer
        out.append(_result(result, routed=True))
    for skipped in step.get("not_run") or ():
        out.append(f'<div class="msg bad">not run ({_e(skipped.get("tool_call_id"))}): '
                   f'{_e(skipped.get("reason"))}</div>')
    if step.get("feedback"):
        out.append(_msg("env", "environment", _content(step["feedback"])))
    out.append("</div>")
    return "".join(out)


def _result(result: Mapping[str, Any], *, routed: bool = False) -> str:
    ok = bool(result.get("ok", True))
    label = "terminal tool" if routed else "result"
    head = (f'{label} <code>{_e(result.get("name"))}</code> &middot; reward '
            f'{_e(_reward(result.get("reward")))}'
            + (" &middot; finished" if result.get("finished") else "")
            + ("" if ok else f' &middot; <span class="bad">{_e(result.get("error_reason"))}'
               "</span>"))
    if routed:
        head += f'<pre class="args">{_e(_json(result.get("input")))}</pre>'
    body = _content(result.get("content") or ())
    if not ok and result.get("error"):
        body += f'<pre class="text bad">{_e(result["error"])}</pre>'
    return _msg("result" if ok else "result failed", head, body)


def episode_html(record: Mapping[str, Any]) -> str:
    """One episode record (``read_trajectories``) as an HTML transcript fragment.

    A ``<section class="episode">`` with ``data-reward``, ``data-error``
    (``1``/``0``) and ``data-episode`` attributes, the viewer's sort and
    filter keys; styled by :data:`ors_gym.viewer.style.STYLE`.
    """
    number = record.get("episode", "?")
    error = has_error(record)
    reward = _reward(record.get("total_reward"))
    title = (f'episode {_e(number)} &middot; {_e(record.get("env_name") or record.get("env_id"))}'
             f' &middot; {_e(record.get("split"))} #{_e(record.get("index"))}')
    head = (f'<div class="ep-head"><span class="title">{title}</span>'
            f'<span class="reward">reward <b>{_e(reward)}</b></span>'
            f'<span class="ended{" bad" if error else ""}">{_e(ended_why(record))}</span>'
            f'<span class="dim">{_e(record.get("length", 0))} turns'
            + (f' &middot; {_e(record.get("model"))}' if record.get("model") else "")
            + "</span></div>")
    prompt = record.get("prompt_content") or [{"type": "text", "text": record.get("prompt", "")}]
    body = [_msg("user", "prompt", _content(prompt))]
    body += [_step(s) for s in record.get("steps") or ()]
    err = record.get("error")
    if isinstance(err, Mapping):
        body.append(f'<div class="msg bad">error {_e(err.get("reason"))}: '
                    f'{_e(err.get("message"))}</div>')
    body.append(f'<div class="final">final reward <b>{_e(reward)}</b> &middot; '
                f'{_e(ended_why(record))}</div>')
    return (f'<section class="episode" data-episode="{_e(number)}" data-reward="{_e(reward)}" '
            f'data-error="{int(error)}">{head}<details open><summary>transcript</summary>'
            f'{"".join(body)}</details></section>')
