"""Train on any ORS environment with tinker-cookbook: its RL data, played through its renderer.

``OrsDatasetBuilder`` is a ``chz`` ``RLDatasetBuilder`` (environment id or ids,
split, batch size, group size, renderer name and tokenizer, as tinker-cookbook's
own builders take them) whose batches are picklable ``OrsEnvGroupBuilder``\\ s.
Their ``Env``\\ s (``OrsTinkerEnv``) play ORS episodes at the token level through
tinker-cookbook's own renderer: it renders each observation and parses each
completion, and the parsed tool calls reach the environment as calls. An
environment's ``score_group`` gives the group's rewards; the episodes' endings
are tinker-cookbook's ``stop/<reason>`` metrics. Needs the ``tinker`` extra
(``pip install 'ors-gym[tinker]'``).
"""

from __future__ import annotations

from ors_gym.errors import OrsDependencyError

try:
    import tinker_cookbook  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise OrsDependencyError(
        "ors_gym.tinker needs tinker-cookbook: pip install 'ors-gym[tinker]'"
    ) from exc

from ors_gym.tinker.dataset import OrsDataset, OrsDatasetBuilder, OrsEnvGroupBuilder
from ors_gym.tinker.env import TINKER_STOP_REASONS, OrsMessageEnv, OrsTinkerEnv, stop_reason

__all__ = [
    "TINKER_STOP_REASONS",
    "OrsDataset",
    "OrsDatasetBuilder",
    "OrsEnvGroupBuilder",
    "OrsMessageEnv",
    "OrsTinkerEnv",
    "stop_reason",
]
