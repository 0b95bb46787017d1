"""An SDK environment whose task tools change mid-episode (for ``tools/list_changed``)."""

from __future__ import annotations

from collections.abc import Sequence

from openreward.environments import JSONObject, ListToolsOutput, ToolOutput, ToolSpec, tool

from ors_gym.envs._common import BundledEnvironment, text_output


class Unlock(BundledEnvironment):
    """``unlock`` makes the task tool ``secret`` listed; ``secret`` ends the episode."""

    def _read_task(self, task_spec: JSONObject) -> None:
        self.unlocked = False

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": "only"}]

    def list_task_tools(self) -> ListToolsOutput:
        schema = {"type": "object", "properties": {}}
        return ListToolsOutput(tools=[ToolSpec(name="secret", description="The prize.",
                                               input_schema=schema)] if self.unlocked else [])

    async def get_prompt(self) -> list:  # type: ignore[type-arg]
        from openreward.environments import TextBlock

        return [TextBlock(text="Unlock, then call secret.")]

    @tool
    async def unlock(self) -> ToolOutput:
        """Unlock the secret tool."""
        self.unlocked = True
        return text_output("Unlocked.")

    @tool(shared=False)
    async def secret(self) -> ToolOutput:
        """The prize."""
        return text_output("You win.", reward=1.0, finished=True)


class Fragile(BundledEnvironment):
    """``spoil`` makes listing the task's tools fail from then on (it returns normally)."""

    def _read_task(self, task_spec: JSONObject) -> None:
        self.spoiled = False

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": "only"}]

    def list_task_tools(self) -> ListToolsOutput:
        if self.spoiled:
            raise RuntimeError("the task's tools cannot be listed")
        return ListToolsOutput(tools=[])

    async def get_prompt(self) -> list:  # type: ignore[type-arg]
        from openreward.environments import TextBlock

        return [TextBlock(text="Call spoil.")]

    @tool
    async def spoil(self) -> ToolOutput:
        """Spoil the tool listing."""
        self.spoiled = True
        return text_output("Spoiled.")
