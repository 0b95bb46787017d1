"""Every ORS environment as a NeMo Gym resources server, and its dataset rows.

``OrsResourcesServer`` (with ``OrsResourcesServerConfig``) serves one ORS
environment to NeMo Gym's agents: one ORS session per NeMo Gym session, one route
per tool, the episode's return as the reward. ``dataset_rows`` writes the rows
NeMo Gym collects rollouts over (``ors-gym nemo-gym dataset``); ``root()`` is the
folder NeMo Gym's launcher searches for the server and its config
(``ors-gym nemo-gym root``). Needs nemo-gym: ``pip install 'ors-gym[nemo-gym]'``
on Python >= 3.13.14, or a venv of its own (``bash scripts/nemo-gym-venv.sh``).
"""

from __future__ import annotations

from ors_gym.errors import OrsDependencyError

try:
    import nemo_gym.base_resources_server  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise OrsDependencyError(
        "ors_gym.nemo_gym needs nemo-gym: pip install 'ors-gym[nemo-gym]' (Python >= 3.13.14), "
        "or build a venv that has it with `bash scripts/nemo-gym-venv.sh`"
    ) from exc

from ors_gym.nemo_gym.rows import dataset_rows, root, write_rows
from ors_gym.nemo_gym.server import (
    OrsResourcesServer,
    OrsResourcesServerConfig,
    OrsVerifyResponse,
    final_answer,
)

__all__ = [
    "OrsResourcesServer",
    "OrsResourcesServerConfig",
    "OrsVerifyResponse",
    "dataset_rows",
    "final_answer",
    "root",
    "write_rows",
]
