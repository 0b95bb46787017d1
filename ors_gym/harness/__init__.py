"""Run any agent harness on ORS episodes and get back rewarded, token-exact trajectories.

A harness (a command line such as Claude Code or Codex, a Python SDK agent, or a
Python callable) runs its own loop: its model is the capture gateway
(:mod:`ors_gym.gateway`), its tools the episode's ORS session served over MCP
(:mod:`ors_gym.mcp`). :class:`HarnessRunner` plays it on one episode or on many at
once (:func:`run_batch`; on a Ray cluster, :func:`ray_batch`, each worker reaching the
gateway through :class:`GatewayClient`); :class:`HarnessEpisode` holds the
:class:`~ors_gym.tokens.Trajectory` with the ORS return, the stop reason and the
harness's output. :class:`Harness` says how a harness is started; the presets
(:func:`preset`) name the well-known ones. Needs the ``gateway`` and ``mcp`` extras.
"""

from __future__ import annotations

from ors_gym.harness.batch import as_trainer_batch, run_batch
from ors_gym.harness.distributed import ray_batch
from ors_gym.harness.presets import PRESETS, claude_code, codex, preset, python_sdk
from ors_gym.harness.remote import GatewayClient
from ors_gym.harness.runner import STOPS, HarnessEpisode, HarnessRunner, last_plain_answer
from ors_gym.harness.spec import Harness, HarnessContext, Launch

__all__ = [
    "PRESETS",
    "STOPS",
    "GatewayClient",
    "Harness",
    "HarnessContext",
    "HarnessEpisode",
    "HarnessRunner",
    "Launch",
    "as_trainer_batch",
    "claude_code",
    "codex",
    "last_plain_answer",
    "preset",
    "python_sdk",
    "ray_batch",
    "run_batch",
]
