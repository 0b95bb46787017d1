"""The self-contained HTML report of a trajectories file (``ors-gym view``).

One file, no network: inline CSS and script, images as ``data:`` URLs, and a
Content-Security-Policy that forbids every fetch. At the top, the summary
table (:func:`ors_gym.eval.summarize`); below, every episode's transcript,
sortable by reward (buttons ``#sort-desc``, ``#sort-asc``, ``#sort-episode``)
and filterable to the episodes with errors (checkbox ``#only-errors``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from ors_gym.trajectories import read_trajectories
from ors_gym.viewer.style import STYLE
from ors_gym.viewer.transcript import episode_html

__all__ = ["STYLE", "report_html", "write_report"]

_SCRIPT = """
(function () {
  var list = document.getElementById('episodes');
  function sortBy(key, dir) {
    var items = Array.prototype.slice.call(list.querySelectorAll('section.episode'));
    items.sort(function (a, b) {
      var x = parseFloat(a.dataset[key]), y = parseFloat(b.dataset[key]);
      if (isNaN(x)) x = -Infinity; if (isNaN(y)) y = -Infinity;
      return dir * (x - y) || (parseFloat(a.dataset.episode) - parseFloat(b.dataset.episode));
    });
    items.forEach(function (el) { list.appendChild(el); });
  }
  function on(id, key, dir) {
    document.getElementById(id).addEventListener('click', function () { sortBy(key, dir); });
  }
  on('sort-desc', 'reward', -1);
  on('sort-asc', 'reward', 1);
  on('sort-episode', 'episode', 1);
  var only = document.getElementById('only-errors');
  function filter() {
    var shown = 0;
    list.querySelectorAll('section.episode').forEach(function (el) {
      var hide = only.checked && el.dataset.error !== '1';
      el.classList.toggle('hidden', hide);
      if (!hide) shown += 1;
    });
    document.getElementById('shown').textContent = shown;
  }
  only.addEventListener('change', filter);
  filter();
})();
"""

_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'")


def _summary_table(records: Sequence[Mapping[str, Any]]) -> str:
    from ors_gym.eval.summary import format_figures, summarize

    s = summarize(records)
    figures = dict(format_figures(s))
    models = sorted({str(r.get("model")) for r in records if r.get("model")})
    envs = sorted({str(r.get("env_id") or r.get("env_name")) for r in records})
    rows = [
        ("environment", ", ".join(envs)),
        ("model", ", ".join(models) or "-"),
        ("episodes", str(s["episodes"])),
        ("mean reward", figures["mean reward"]),
        ("success rate", figures["success rate"]),
        ("mean turns", figures["mean turns"]),
        ("errors", ", ".join(f"{k}: {v}" for k, v in s["errors"].items()) or "none"),
    ]
    if s.get("usage"):
        rows.append(("tokens", ", ".join(f"{k} {v}" for k, v in s["usage"].items())))
    cells = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="summary" id="summary">{cells}</table>'


def report_html(records: Sequence[Mapping[str, Any]], *, title: str = "ORS trajectories") -> str:
    """The whole report page for ``records`` (episode records) as one HTML string."""
    episodes = "".join(episode_html(r) for r in records)
    summary = _summary_table(records) if records else "<p>No episodes.</p>"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>{escape(title)}</title><style>{STYLE}"
        "body{margin:12px}</style></head><body><div class=\"ors-view\">"
        f"<h1>{escape(title)}</h1>{summary}"
        '<div class="controls"><span>sort by reward:</span>'
        '<button id="sort-desc" type="button">highest first</button>'
        '<button id="sort-asc" type="button">lowest first</button>'
        '<button id="sort-episode" type="button">episode order</button>'
        '<label><input type="checkbox" id="only-errors"> only episodes with errors</label>'
        f'<span><span id="shown">{len(records)}</span> of {len(records)} shown</span></div>'
        f'<div id="episodes">{episodes}</div></div>'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def write_report(
    path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
) -> Path:
    """Write the report of the trajectories file ``path`` to ``out`` (default: ``path``
    with ``.html``); returns where it went."""
    source = Path(path)
    target = Path(out) if out is not None else source.with_suffix(".html")
    records = read_trajectories(source)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(report_html(records, title=f"{source.name}"), encoding="utf-8")
    return target
