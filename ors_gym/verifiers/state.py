"""What one rollout's task setup, tool server and scoring share: its ORS session.

verifiers carries a rollout's ``State`` between the process running the task and the
tool server's process (as JSON over its local state channel); it is never written to
a trace. So the hosted API key rides here, masked in every repr, and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_serializer
from verifiers.v1.state import State

from ors_gym.protocol import CallResult, RunToolSuccess

__all__ = ["OrsConnection", "OrsState"]


class OrsConnection(BaseModel):
    """How to reach the environment's server: a URL or a hosted deployment."""

    base_url: str | None = None
    deployment: str | None = None
    variant: str | None = None
    api_key: SecretStr | None = None
    timeout: float = 60.0

    @field_serializer("api_key", when_used="json")
    def _reveal_for_the_channel(self, key: SecretStr | None) -> str | None:
        return None if key is None else key.get_secret_value()

    @property
    def location(self) -> str:
        """The server's URL or the deployment's name, for messages."""
        return self.base_url or f"deployment {self.deployment}"

    def key(self) -> tuple[Any, ...]:
        """Identifies one backend: connections with equal keys share it."""
        secret = None if self.api_key is None else self.api_key.get_secret_value()
        return (self.base_url, self.deployment, self.variant, secret, self.timeout)


class OrsState(State):
    """One rollout's ORS session and its running episode."""

    connection: OrsConnection = Field(default_factory=OrsConnection)
    env_name: str = ""
    session_id: str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The session's tools as MCP lists them (name, description, input_schema)."""
    terminal_tool: dict[str, Any] | None = None
    """The hidden ``@terminal`` tool: ``{"name", "arg"}``."""
    rewards: list[float | None] = Field(default_factory=list)
    """Each ORS tool call's reward, in order (None: no signal that step)."""
    episode_return: float = 0.0
    finished: bool = False
    calls: int = 0

    def record(self, result: CallResult) -> None:
        """Count one ORS call's outcome into the episode."""
        self.calls += 1
        if isinstance(result, RunToolSuccess):
            reward = result.output.reward
            self.rewards.append(reward)
            if reward is not None:
                self.episode_return += float(reward)
            self.finished = self.finished or result.output.finished
        else:
            self.rewards.append(None)

    def terminal_input(self, text: str) -> Mapping[str, Any]:
        """The terminal tool's input for a final plain reply ``text``."""
        assert self.terminal_tool is not None
        arg = self.terminal_tool.get("arg")
        return {} if arg is None else {arg: text}
