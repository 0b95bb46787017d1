"""HTML views of ORS environments and recorded episodes (``ors-gym view``, Jupyter).

- :func:`write_report` / :func:`report_html`: a trajectories file as one
  self-contained page (summary, transcripts, sort by reward, error filter);
- :func:`episode_html`: one recorded episode's transcript, for Jupyter;
- :func:`env_html`: an environment's card (name, tools, terminal tool, splits, backend).

Everything taken from a trajectory or an environment is HTML-escaped.
"""

from __future__ import annotations

from ors_gym.viewer.notebook import env_html, episode_html
from ors_gym.viewer.page import report_html, write_report

__all__ = ["env_html", "episode_html", "report_html", "write_report"]
