"""What a reset asks of the platform before its session: the secrets preflight, and a
task drawn with ``task_weights``. Called by ``AsyncOrsEnv.open`` only when an env has
``check_secrets`` or ``task_weights`` set."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ors_gym.platform._difficulty import draw_index
from ors_gym.platform._preflight import check_required_secrets
from ors_gym.secret import reveal

if TYPE_CHECKING:
    from ors_gym.catalog import Catalog
    from ors_gym.settings import EnvSettings

__all__ = ["platform_reset"]


async def platform_reset(
    catalog: Catalog, settings: EnvSettings, options: Mapping[str, Any],
    rng: np.random.Generator,
) -> Mapping[str, Any]:
    """Raise naming missing secrets (``check_secrets``); return the reset options with a
    task ``index`` drawn by ``task_weights`` unless they name a task already."""
    if settings.check_secrets and settings.deployment is not None:
        await check_required_secrets(settings.deployment, settings.secrets or {},
                                     reveal(settings.api_key) or _env_key())
    if settings.task_weights is None or "index" in options or "task_spec" in options:
        return options
    split = options.get("split") or await catalog.default_split()
    count = await catalog.num_tasks(split)
    return {**options, "split": split,
            "index": draw_index(settings.task_weights, count, rng, split)}


def _env_key() -> str | None:
    import os

    from ors_gym.backends.http._settings import API_KEY_VAR

    return os.environ.get(API_KEY_VAR) or None
