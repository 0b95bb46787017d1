"""HTML for Jupyter: an environment's card, and a recorded episode's transcript.

:func:`env_html` shows an env (``OrsEnv``, a wrapper of one, or
``AsyncOrsEnv`` once discovered): its name, backend and location, splits,
tools with their parameters, and the terminal tool. :func:`episode_html`
(the viewer's transcript) shows a record from ``read_trajectories``. Both
return self-styled fragments (``<div class="ors-view">``), so that
``_repr_html_`` can return them as they are.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from html import escape
from typing import Any

from ors_gym.viewer.style import STYLE
from ors_gym.viewer.transcript import episode_html as _episode

__all__ = ["env_html", "episode_html"]


def _wrap(body: str) -> str:
    return f'<div class="ors-view"><style>{STYLE}</style>{body}</div>'


def episode_html(record: Mapping[str, Any]) -> str:
    """A recorded episode (a ``read_trajectories`` record) as a styled HTML transcript."""
    return _wrap(_episode(record))


def _params(schema: Any) -> str:
    if not isinstance(schema, Mapping) or not schema.get("properties"):
        return '<span class="dim">none</span>'
    required = set(schema.get("required") or ())
    items = []
    for name, prop in schema["properties"].items():
        prop = prop if isinstance(prop, Mapping) else {}
        kind = prop.get("type") or ("enum" if "enum" in prop else "any")
        extra = f" one of {json.dumps(prop['enum'])}" if "enum" in prop else ""
        star = "" if name in required else "?"
        items.append(f"<code>{escape(str(name))}{star}: {escape(str(kind))}</code>"
                     f"{escape(extra)}")
    return "<br>".join(items)


def _splits(env: Any) -> list[str]:
    ors = getattr(env, "unwrapped", env)
    try:
        listed = ors.backend.splits(ors.env_name)
        if inspect.iscoroutine(listed):  # an async backend: not asked from a repr
            listed.close()
            return []
        return [str(s.name) for s in listed]
    except Exception:  # a server that lists none, or cannot be reached: leave it out
        return []


def env_html(env: Any) -> str:
    """An environment's card: name, backend, splits, tools (with parameters), terminal tool."""
    ors = getattr(env, "unwrapped", env)
    tools = ors.tools
    backend = type(getattr(ors, "backend", None)).__name__
    name = ors.env_name
    spec = getattr(ors, "spec", None)
    rows = "".join(
        f"<tr><td><code>{escape(t.name)}</code></td><td>{escape(t.description or '')}</td>"
        f"<td>{_params(t.input_schema)}</td></tr>"
        for t in tools.tools
    )
    terminal = tools.terminal_tool
    terminal_text = (f"<code>{escape(terminal.name)}</code>: a plain answer (no tool call) goes "
                     "to it" if terminal is not None else "none")
    splits = ", ".join(_splits(ors)) or "?"
    head = (f"<h3>{escape(str(name))}"
            + (f' <span class="dim">{escape(str(spec.id))}</span>' if spec is not None else "")
            + "</h3>")
    facts = (f'<table class="summary"><tr><th>backend</th><td>{escape(backend)} at '
             f"{escape(str(ors.location))}</td></tr><tr><th>splits</th><td>{escape(splits)}"
             f"</td></tr><tr><th>terminal tool</th><td>{terminal_text}</td></tr></table>")
    table = (f'<table class="tools"><tr><th>tool</th><th>description</th><th>parameters</th>'
             f"</tr>{rows}</table>")
    return _wrap(head + facts + table)
