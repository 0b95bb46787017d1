"""``AsyncPlatformClient`` and ``PlatformClient``: the OpenReward platform's API from ors_gym.

What the SDK's client asks the platform beside sessions (an environment's
required secrets, its per-task difficulty, the rollout log), sent with
ors_gym's own HTTP backend: the same pooled connections, retries honouring
``Retry-After``, redirects that keep the key on its own host, and errors
that never show it. The API host and the key come from the SDK's variables
(``OPENREWARD_API_URL``, else ``api.`` + ``OPENREWARD_URL``;
``OPENREWARD_API_KEY``) unless given.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

from ors_gym.backends.http._settings import API_KEY_VAR
from ors_gym.backends.http._steps import Op
from ors_gym.platform._difficulty import TaskDifficulty, task_weights
from ors_gym.platform._ops import PlatformOps, api_location_and_source

__all__ = ["AsyncPlatformClient", "PlatformClient"]

_T = TypeVar("_T")

TrainingStage = Literal["pretrained", "sft", "rl"]


class AsyncPlatformClient:
    """The platform's API, awaited. ``base_url``: the API host (default as the SDK's);
    ``api_key``: sent as ``X-API-Key`` (default ``OPENREWARD_API_KEY``), never shown.
    Other keywords are ``HttpOptions`` (``timeout``, ``max_retries``...)."""

    def __init__(
        self, *, base_url: str | None = None, api_key: str | None = None, **options: Any
    ) -> None:
        from ors_gym.backends.http import AsyncHttpBackend

        if base_url is None:
            base_url, self.location_source = api_location_and_source()
        else:
            self.location_source = "base_url"
        key = api_key or os.environ.get(API_KEY_VAR) or None
        self._backend = AsyncHttpBackend(base_url, api_key=key, _set_as="PlatformClient",
                                         **options)
        self.location = self._backend.location
        self._ops = PlatformOps(self._backend.settings, time.monotonic)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    async def _run(self, op: Op[_T]) -> _T:
        return await self._backend._run(op)

    async def required_secrets(self, deployment: str) -> list[str]:
        """The secret names ``deployment`` (``"Owner/name"``) needs to open a session."""
        return await self._run(self._ops.required_secrets(deployment))

    async def task_difficulty(
        self, deployment: str, *, variant: str | None = None, split: str | None = None,
        model_name: str | None = None, min_model_params: int | None = None,
        max_model_params: int | None = None, training_stage: TrainingStage | None = None,
    ) -> list[TaskDifficulty]:
        """Per-task reward statistics of the rollouts logged for ``deployment``
        (see ``TaskDifficulty``), filtered as the SDK's ``get_task_difficulty``."""
        filters: Mapping[str, str | int | None] = {
            "model_name": model_name, "min_model_params": min_model_params,
            "max_model_params": max_model_params, "training_stage": training_stage,
        }
        rows = await self._run(self._ops.task_difficulty(
            deployment, variant=variant, split=split, filters=filters))
        return [TaskDifficulty.from_json(row, where=self.location) for row in rows]

    async def task_weights(
        self, deployment: str, num_tasks: int, *, split: str | None = None,
        prefer: Literal["uncertain", "hard"] = "uncertain", **filters: Any,
    ) -> list[float]:
        """``task_weights`` of this deployment's difficulty for ``split``: one weight per
        task index, for ``task_weights=`` of an env or a trainer dataset."""
        rows = await self.task_difficulty(deployment, split=split, **filters)
        return task_weights(rows, num_tasks, prefer=prefer)

    async def environment_ids(
        self, deployment: str, variant: str | None = None
    ) -> tuple[str | None, str | None]:
        """The platform's ids of ``deployment`` and of its ``variant`` (None where it does
        not say), which rollouts carry as the SDK's do."""
        env_id = await self._run(self._ops.environment_id(deployment))
        if variant is None:
            return env_id, None
        return env_id, await self._run(self._ops.variant_id(deployment, variant))

    async def post_rollouts(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Post one batch of rollout-log events (``POST /v1/rollouts``)."""
        await self._run(self._ops.post_rollouts(events))

    async def aclose(self) -> None:
        """Close the connections (the client stays usable)."""
        await self._backend.aclose()

    async def __aenter__(self) -> AsyncPlatformClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class PlatformClient:
    """``AsyncPlatformClient``'s blocking face: the same methods, not awaited."""

    def __init__(
        self, *, base_url: str | None = None, api_key: str | None = None, **options: Any
    ) -> None:
        from ors_gym._runtime import Runtime

        self.core = AsyncPlatformClient(base_url=base_url, api_key=api_key, **options)
        self.location = self.core.location
        self._runtime = Runtime("ors-platform")

    def __repr__(self) -> str:
        return f"PlatformClient({self.location!r})"

    def required_secrets(self, deployment: str) -> list[str]:
        """The secret names ``deployment`` (``"Owner/name"``) needs to open a session."""
        return self._runtime.run(self.core.required_secrets(deployment))

    def task_difficulty(self, deployment: str, **filters: Any) -> list[TaskDifficulty]:
        """``AsyncPlatformClient.task_difficulty``, blocking."""
        return self._runtime.run(self.core.task_difficulty(deployment, **filters))

    def task_weights(self, deployment: str, num_tasks: int, **options: Any) -> list[float]:
        """``AsyncPlatformClient.task_weights``, blocking."""
        return self._runtime.run(self.core.task_weights(deployment, num_tasks, **options))

    def close(self) -> None:
        """Close the connections and the client's event loop."""
        self._runtime.close(self.core.aclose())

    def __enter__(self) -> PlatformClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
