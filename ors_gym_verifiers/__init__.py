"""The verifiers plugin module for ``vf-eval ors-gym-verifiers``: ``ors_gym.verifiers``' taskset.

verifiers finds a taskset by a top-level module named after its id, exporting one
``Taskset`` (and optionally one ``Env`` and one ``Harness``) in ``__all__``.
"""

from __future__ import annotations

from ors_gym.verifiers import OrsHarness, OrsSingleAgentEnv, OrsTaskset

__all__ = ["OrsHarness", "OrsSingleAgentEnv", "OrsTaskset"]
