"""The taskset's configuration, read from verifiers' own command line (``--env.taskset.*``).

The API key is never a field: ``api_key_var`` names the environment variable that
holds it, so it stays off the command line, the saved run config and the logs.
"""

from __future__ import annotations

from pydantic import Field
from verifiers.v1.configs.task import TaskConfig
from verifiers.v1.configs.taskset import TasksetConfig
from verifiers.v1.mcp import SharedToolsetConfig

__all__ = ["DEFAULT_API_KEY_VAR", "OrsTaskConfig", "OrsTasksetConfig", "OrsToolsetConfig"]

#: Where a hosted deployment's API key is read from unless ``api_key_var`` says otherwise.
DEFAULT_API_KEY_VAR = "OPENREWARD_API_KEY"


class OrsTaskConfig(TaskConfig):
    """Per-task knobs (``--env.taskset.task.*``): verifiers' judges, stops and rewards."""


class OrsToolsetConfig(SharedToolsetConfig):
    """Where the tool server forwarding the model's calls runs (``--env.taskset.tools.*``)."""


class OrsTasksetConfig(TasksetConfig):
    """One ORS environment: a server (``base_url``) or a hosted ``deployment``."""

    base_url: str | None = None
    """The ORS server, e.g. the URL ``ors-gym serve`` prints."""
    env_name: str | None = None
    """The environment on that server (default: the server's first)."""
    split: str | None = None
    """The task split (default: ``train`` where the environment lists it, else its first)."""
    deployment: str | None = None
    """A hosted OpenReward deployment, ``Namespace/name`` (instead of ``base_url``)."""
    variant: str | None = None
    """One environment class inside a hosted deployment."""
    api_key_var: str = DEFAULT_API_KEY_VAR
    """The environment variable holding the hosted platform's API key."""
    timeout: float = Field(60.0, gt=0)
    """Seconds one ORS request may take."""
    task: OrsTaskConfig = OrsTaskConfig()
    tools: OrsToolsetConfig = OrsToolsetConfig()

    def check(self) -> None:
        """Raise ValueError unless exactly one place (a URL or a deployment) is given.

        Not a validator: verifiers builds this config from partial input on its way.
        """
        if self.base_url is None and self.deployment is None:
            raise ValueError(
                "say where the environment lives: --env.taskset.base-url URL (an ORS server, "
                "e.g. from `ors-gym serve`) or --env.taskset.deployment Namespace/name (hosted)"
            )
        if self.base_url is not None and self.deployment is not None:
            raise ValueError(
                "give --env.taskset.base-url or --env.taskset.deployment, not both"
            )
        if self.variant is not None and self.deployment is None:
            raise ValueError("--env.taskset.variant needs --env.taskset.deployment Namespace/name")
