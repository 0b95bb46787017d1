"""The OpenReward platform beside its sessions: what the SDK's client asks it, from ors_gym.

- ``PlatformClient`` / ``AsyncPlatformClient``: an environment's required secrets
  and its per-task difficulty (``TaskDifficulty``);
- ``task_weights``: one weight per task index from that difficulty, for
  ``task_weights=`` of an env (each reset draws its task with them) and
  ``weighted_indices`` for a trainer's dataset rows;
- ``RolloutUploader``: finished episodes uploaded to the rollout log in the
  background (``RecordTrajectories(upload=...)``, ``ors-gym eval --upload``).

The requests are those of the ``openreward`` SDK's client, sent with ors_gym's own
HTTP backend (the SDK is not imported), through its public face for the platform's
API (``AsyncHttpBackend.platform_api``). Importing this package registers the
required-secrets preflight of ``check_secrets`` with the core
(``ors_gym.settings.register_preflight``); ``import ors_gym`` imports it.
"""

from __future__ import annotations

from ors_gym.platform._client import AsyncPlatformClient, PlatformClient
from ors_gym.platform._difficulty import (
    ResponseChars,
    TaskDifficulty,
    dataset_indices,
    task_weights,
    weighted_indices,
)
from ors_gym.platform._preflight import check_required_secrets, secrets_preflight
from ors_gym.platform._upload import RolloutUploader
from ors_gym.settings import register_preflight

register_preflight(secrets_preflight)  # check_secrets: asked before an env's first request

__all__ = [
    "AsyncPlatformClient",
    "PlatformClient",
    "ResponseChars",
    "RolloutUploader",
    "TaskDifficulty",
    "check_required_secrets",
    "dataset_indices",
    "task_weights",
    "weighted_indices",
]
