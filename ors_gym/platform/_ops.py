"""The OpenReward platform's API, each endpoint a sans-IO operation over ``Exchange``.

The hosted platform has an API host beside its session host: an environment's
required secrets, its per-task difficulty, and the rollout log. Each request
here is the one the SDK's client sends (``openreward.api.environments.client``
and ``openreward.api.rollouts``), written as an ``Op`` so the HTTP backend's
driver performs it with the same retries, redirects and error messages as
every ORS request. ``api_location_and_source`` finds the API host as the SDK
does: ``OPENREWARD_API_URL``, else the ``api.`` subdomain of ``OPENREWARD_URL``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from ors_gym.backends.http._exchange import Exchange
from ors_gym.backends.http._settings import platform_location
from ors_gym.backends.http._steps import Op
from ors_gym.errors import OrsProtocolError

__all__ = ["PlatformOps", "api_location_and_source", "split_deployment"]


def api_location_and_source(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The platform's API host as the SDK finds it, and the variable it came from."""
    location, source = platform_location("OPENREWARD_API_URL", "api", environ)
    return location.rstrip("/"), source


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


class PlatformOps(Exchange):
    """The platform API's endpoints; each method returns an ``Op``."""

    def _get(self, path: str, what: str) -> Op[Any]:
        return self.request("GET", path, what=what, where=self.where())

    def required_secrets(self, deployment: str) -> Op[list[str]]:
        """``GET /v1/environments/{owner}/{name}/required-secrets``: the secret names the
        environment's constructor reads."""
        what = f"ask which secrets {deployment} needs"
        answer = yield from self._get(_env_path(deployment, "/required-secrets"), what)
        names = answer.get("secrets") if isinstance(answer, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise OrsProtocolError(f"{what}: the answer has no 'secrets' list of names",
                                   server=self.location)
        return list(names)

    def task_difficulty(
        self, deployment: str, *, variant: str | None = None, split: str | None = None,
        filters: Mapping[str, str | int | None] | None = None,
    ) -> Op[list[dict[str, Any]]]:
        """``GET .../task-difficulty``: one row per ``(split, variant, task_index)`` with
        reward and response-length statistics of the rollouts logged for it.

        ``filters``: ``model_name``, ``min_model_params``, ``max_model_params``,
        ``training_stage`` (the SDK's query parameters, in its order).
        """
        params: dict[str, str] = {}
        if variant is not None:
            params["variant"] = variant
        if split is not None:
            params["split"] = split
        for key, value in (filters or {}).items():
            if value is not None:
                params[key] = str(value)
        path = _env_path(deployment, "/task-difficulty")
        if params:
            path += "?" + urlencode(params)
        what = f"ask {deployment}'s task difficulty"
        answer = yield from self._get(path, what)
        rows = answer.get("tasks") if isinstance(answer, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise OrsProtocolError(f"{what}: the answer has no 'tasks' list",
                                   server=self.location)
        return rows

    def environment_id(self, deployment: str) -> Op[str | None]:
        """``GET /v1/environments/{owner}/{name}``: the platform's id for the environment
        (rollouts carry it, as the SDK's do)."""
        answer = yield from self._get(_env_path(deployment), f"look up {deployment}")
        found = answer.get("id") if isinstance(answer, dict) else None
        return str(found) if found is not None else None

    def variant_id(self, deployment: str, variant: str) -> Op[str | None]:
        """``GET .../variants``: the id of ``variant`` (None when it is not listed)."""
        answer = yield from self._get(_env_path(deployment, "/variants"),
                                      f"list {deployment}'s variants")
        for item in answer if isinstance(answer, list) else []:
            if isinstance(item, dict) and item.get("name") == variant:
                found = item.get("id")
                return str(found) if found is not None else None
        return None

    def post_rollouts(self, events: Sequence[Mapping[str, Any]]) -> Op[None]:
        """``POST /v1/rollouts`` with ``{"events": [...]}``: one batch of the rollout log.

        Sent again after an answer that says it was not taken (429, 502, 503, 504) or
        when the platform cannot have read it, but not after a connection dropped once
        it was sent: the platform is not known to drop an event id it already has, so a
        resend could log the batch twice (the SDK's client resends none of those
        either: it retries 5xx answers only).
        """
        yield from self.request("POST", "/v1/rollouts", what=f"the upload of {len(events)} "
                                "rollout events", where=self.where(),
                                body={"events": list(events)}, idempotent=False)
