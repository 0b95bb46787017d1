"""``OrsTaskset``: the tasks of one ORS environment split; and the env and harness it runs with.

``OrsSingleAgentEnv`` plays each task with one agent (verifiers' ``SingleAgentEnv``, for
ORS) and deletes every session an episode's rollouts left open, whatever happened to
them; it defaults the agent to the local subprocess runtime, since an ORS environment
runs on its own server. ``OrsHarness`` is verifiers' plain chat loop (the ``null``
harness): the model, the ORS tools over MCP, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator

from verifiers.v1.agent import Agents
from verifiers.v1.configs.agent import AgentConfig
from verifiers.v1.configs.env import EnvConfig
from verifiers.v1.env import Env
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.mcp import Toolset
from verifiers.v1.runtimes import SubprocessConfig
from verifiers.v1.task import Task
from verifiers.v1.taskset import Taskset

from ors_gym.verifiers.config import OrsTasksetConfig
from ors_gym.verifiers.sessions import close_backends, close_session, discover, episode_sessions
from ors_gym.verifiers.task import OrsTask, OrsTaskData
from ors_gym.verifiers.toolset import OrsToolset

__all__ = ["OrsHarness", "OrsSingleAgentEnv", "OrsSingleAgentEnvConfig", "OrsTaskset"]


class OrsTaskset(Taskset[OrsTask, OrsTasksetConfig]):
    """Every task of one split of an ORS environment, in index order."""

    @classmethod
    def toolsets(cls, config: OrsTasksetConfig) -> list[Toolset]:
        return [OrsToolset(config.tools)]

    def load(self) -> Iterator[OrsTask]:
        config = self.config
        env_name, split, count = discover(config)
        for index in range(count):
            yield OrsTask(
                OrsTaskData(
                    name=f"{env_name}/{split}/{index}",
                    # Replaced by the ORS prompt when the rollout's session opens.
                    prompt=f"(task {index} of split {split!r} of ORS environment {env_name!r})",
                    base_url=config.base_url, deployment=config.deployment,
                    variant=config.variant, api_key_var=config.api_key_var,
                    request_timeout=config.timeout, env_name=env_name, split=split, index=index,
                ),
                config.task,
            )


class OrsSingleAgentEnvConfig(EnvConfig):
    """One agent seat, as ``SingleAgentEnv`` has, on the local subprocess runtime by default."""

    agent: AgentConfig = AgentConfig(runtime=SubprocessConfig())
    """The one seat: the policy under evaluation or training (``--env.agent.*``)."""


class OrsSingleAgentEnv(Env[OrsSingleAgentEnvConfig]):
    """One agent per episode; no ORS session outlives its episode."""

    async def run(self, task: Task, agents: Agents) -> None:
        with episode_sessions() as left_open:
            try:
                await agents.agent.run(task)
            finally:
                for sid, conn in list(left_open.items()):
                    await close_session(conn, sid)

    async def stop(self) -> None:
        await close_backends()


class OrsHarness(NullHarness):
    """verifiers' plain tool-calling chat loop, the default for ORS environments."""
