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

from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote, urlencode

from ors_gym.errors import OrsProtocolError
from ors_gym.platform._difficulty import TaskDifficulty, task_weights

__all__ = ["AsyncPlatformClient", "PlatformClient", "split_deployment"]

TrainingStage = Literal["pretrained", "sft", "rl"]


def split_deployment(deployment: str) -> tuple[str, str]:
    """``("Owner", "name")`` of ``"Owner/name"``; a ValueError names the expected form."""
    owner, sep, name = deployment.partition("/")
    if not sep or not owner or not name or "/" in name:
        raise ValueError(
            f"the platform keys environments by owner: give deployment='Owner/name', got "
            f"{deployment!r}"
        )
    return owner, name


def _env_path(deployment: str, suffix: str = "") -> str:
    owner, name = split_deployment(deployment)
    return f"/v1/environments/{quote(owner, safe='')}/{quote(name, safe='')}{suffix}"


class AsyncPlatformClient:
    """The platform's API, awaited. ``base_url``: the API host (default as the SDK's);
    ``api_key``: sent as ``X-API-Key`` (default ``OPENREWARD_API_KEY``), never shown.
    Other keywords are ``HttpOptions`` (``timeout``, ``max_retries``...).

    Each method sends the request the SDK's client sends, through
    ``AsyncHttpBackend.platform_api``'s ``request``: the same retries, redirects
    and error messages as every ORS request, worded for the platform's API."""

    def __init__(
        self, *, base_url: str | None = None, api_key: str | None = None, **options: Any
    ) -> None:
        from ors_gym.backends.http import AsyncHttpBackend

        self._backend = AsyncHttpBackend.platform_api(base_url, api_key=api_key, **options)
        self.location = self._backend.location
        self.location_source = self._backend.settings.location_source

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    async def required_secrets(self, deployment: str) -> list[str]:
        """The secret names ``deployment`` (``"Owner/name"``) needs to open a session
        (``GET .../required-secrets``: the names the environment's constructor reads)."""
        what = f"ask which secrets {deployment} needs"
        answer = await self._backend.request(
            "GET", _env_path(deployment, "/required-secrets"), what=what)
        names = answer.get("secrets") if isinstance(answer, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise OrsProtocolError(f"{what}: the answer has no 'secrets' list of names",
                                   server=self.location)
        return list(names)

    async def task_difficulty(
        self, deployment: str, *, variant: str | None = None, split: str | None = None,
        model_name: str | None = None, min_model_params: int | None = None,
        max_model_params: int | None = None, training_stage: TrainingStage | None = None,
    ) -> list[TaskDifficulty]:
        """Per-task reward statistics of the rollouts logged for ``deployment``
        (see ``TaskDifficulty``), filtered as the SDK's ``get_task_difficulty``
        (``GET .../task-difficulty``, its query parameters in the SDK's order)."""
        params: dict[str, str] = {}
        if variant is not None:
            params["variant"] = variant
        if split is not None:
            params["split"] = split
        filters: Mapping[str, str | int | None] = {
            "model_name": model_name, "min_model_params": min_model_params,
            "max_model_params": max_model_params, "training_stage": training_stage,
        }
        params.update({k: str(v) for k, v in filters.items() if v is not None})
        path = _env_path(deployment, "/task-difficulty")
        if params:
            path += "?" + urlencode(params)
        what = f"ask {deployment}'s task difficulty"
        answer = await self._backend.request("GET", path, what=what)
        rows = answer.get("tasks") if isinstance(answer, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise OrsProtocolError(f"{what}: the answer has no 'tasks' list",
                                   server=self.location)
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
        answer = await self._backend.request("GET", _env_path(deployment),
                                             what=f"look up {deployment}")
        found = answer.get("id") if isinstance(answer, dict) else None
        env_id = str(found) if found is not None else None
        if variant is None:
            return env_id, None
        listed = await self._backend.request("GET", _env_path(deployment, "/variants"),
                                             what=f"list {deployment}'s variants")
        for item in listed if isinstance(listed, list) else []:
            if isinstance(item, dict) and item.get("name") == variant:
                found = item.get("id")
                return env_id, (str(found) if found is not None else None)
        return env_id, None

    async def post_rollouts(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Post one batch of rollout-log events (``POST /v1/rollouts``).

        Sent again after an answer that says it was not taken (429, 502, 503, 504) or
        when the platform cannot have read it, but not after a connection dropped once
        it was sent: the platform is not known to drop an event id it already has, so a
        resend could log the batch twice (the SDK's client resends none of those
        either: it retries 5xx answers only).
        """
        await self._backend.request(
            "POST", "/v1/rollouts", body={"events": list(events)}, idempotent=False,
            what=f"the upload of {len(events)} rollout events")

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
