"""Toolbox: task-specific tools, plus a tool with a rich input schema.

``add``, ``multiply`` and ``negate`` are declared ``@tool(shared=False)``: they
are absent from ``/tools`` and appear in ``/task_tools`` only for tasks whose
``tools`` field names them (``list_task_tools``). The SDK would still run an
unlisted task tool called by name; these refuse instead (text feedback, reward
0), so a task really is limited to its own tools.

``submit(value)`` ends the episode: reward 1.0 if ``value`` equals the task's
``target``, else 0.0. ``configure`` exercises JSON-Schema sampling (enum,
optional, bounded int and float, bool, bounded list, nested model via
``$defs``/``$ref``, const); it echoes the validated settings, reward 0, and
the episode goes on.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Literal, get_type_hints

from openreward.environments import (
    JSONObject,
    ListToolsOutput,
    TextBlock,
    ToolOutput,
    ToolSpec,
    tool,
)
from pydantic import BaseModel, Field

from ors_gym.envs._common import BundledEnvironment, seeded_rng, text_output

__all__ = ["TASK_TOOLS", "Toolbox"]

#: The task-specific (``shared=False``) tools a task may name in its ``tools`` field.
TASK_TOOLS = ("add", "multiply", "negate")
_SIZES = {"train": 30, "test": 10}


class PairInput(BaseModel):
    """Two integers."""

    a: int = Field(description="First operand.")
    b: int = Field(description="Second operand.")


class NegateInput(BaseModel):
    """One integer."""

    x: int = Field(description="The number to negate.")


class SubmitValue(BaseModel):
    """Input of ``submit``."""

    value: int = Field(description="Your final integer answer.")


class Precision(BaseModel):
    """Nested settings (rendered under ``$defs`` and referenced with ``$ref``)."""

    digits: int = Field(default=2, ge=0, le=8, description="Decimal digits to keep.")
    rounding: Literal["half_even", "half_up", "down"] = "half_even"


class ConfigureInput(BaseModel):
    """Settings with one field of each JSON-Schema shape a sampler must handle."""

    mode: Literal["fast", "balanced", "thorough"] = Field(description="Speed/accuracy trade-off.")
    label: str | None = Field(default=None, max_length=32, description="Optional name.")
    retries: int = Field(default=3, ge=0, le=10, description="Retry budget.")
    temperature: float = Field(default=0.5, ge=0.0, le=2.0, description="Sampling temperature.")
    verbose: bool = Field(default=False, description="Log more.")
    tags: list[str] = Field(default_factory=list, max_length=3, description="Up to 3 tags.")
    precision: Precision = Field(description="Numeric precision settings.")
    version: Literal["v1"] = Field(default="v1", description="Settings format version.")


def _spec_for(cls: type, name: str) -> ToolSpec:
    """A ToolSpec for method ``name`` built as the SDK's ``list_tools`` does."""
    fn = inspect.unwrap(getattr(cls, name))
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    schema = None
    if params:
        model: type[BaseModel] = get_type_hints(fn)[params[0].name]
        schema = model.model_json_schema()
    return ToolSpec(name=name, description=(fn.__doc__ or "").strip(), input_schema=schema)


def _make_task(split: str, index: int) -> dict[str, Any]:
    """An arithmetic chore plus the tools that make it easy."""
    rng = seeded_rng("toolbox", split, index)
    a, b = rng.randint(2, 30), rng.randint(2, 30)
    op = ("add", "multiply", "negate_sum")[index % 3]
    if op == "add":
        question, target, tools = f"Compute {a} + {b}.", a + b, ["add"]
    elif op == "multiply":
        question, target, tools = f"Compute {a} * {b}.", a * b, ["multiply"]
    else:
        question, target, tools = f"Compute -({a} + {b}).", -(a + b), ["add", "negate"]
    return {"id": f"{split}-{index}", "question": question, "target": target, "tools": tools}


class Toolbox(BundledEnvironment):
    """Compute a number with this task's own tools, then ``submit`` it."""

    def _read_task(self, task_spec: JSONObject) -> None:
        if "target" not in task_spec:
            raise ValueError("a Toolbox task needs an integer 'target'")
        self.target = int(task_spec["target"])
        self.question = str(task_spec.get("question", f"Submit {self.target}."))
        names = [str(t) for t in task_spec.get("tools") or []]
        unknown = sorted(set(names) - set(TASK_TOOLS))
        if unknown:
            raise ValueError(
                f"unknown Toolbox task tools {unknown}; choose from {list(TASK_TOOLS)}"
            )
        self.task_tool_names = [t for t in TASK_TOOLS if t in names]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        cls._check_split(split)
        return [_make_task(split, i) for i in range(_SIZES[split])]

    def list_task_tools(self) -> ListToolsOutput:
        """This task's own tools (those named in its ``tools`` field)."""
        return ListToolsOutput(tools=[_spec_for(type(self), n) for n in self.task_tool_names])

    async def get_prompt(self) -> list[TextBlock]:
        tools = ", ".join(self.task_tool_names) or "none"
        return [
            TextBlock(
                text=f"{self.question} Task tools: {tools}. Submit the result with submit.",
                detail={"tools": list(self.task_tool_names)},
            )
        ]

    def _refuse(self, name: str) -> ToolOutput | None:
        if name in self.task_tool_names:
            return None
        return text_output(
            f"{name!r} is not available in this task; its tools are "
            f"{self.task_tool_names} plus submit and configure."
        )

    @tool(shared=False)
    async def add(self, params: PairInput) -> ToolOutput:
        """Return a + b (a task-specific tool)."""
        refused = self._refuse("add")
        return refused or text_output(
            str(params.a + params.b), metadata={"result": params.a + params.b}
        )

    @tool(shared=False)
    async def multiply(self, params: PairInput) -> ToolOutput:
        """Return a * b (a task-specific tool)."""
        refused = self._refuse("multiply")
        return refused or text_output(
            str(params.a * params.b), metadata={"result": params.a * params.b}
        )

    @tool(shared=False)
    async def negate(self, params: NegateInput) -> ToolOutput:
        """Return -x (a task-specific tool)."""
        refused = self._refuse("negate")
        return refused or text_output(str(-params.x), metadata={"result": -params.x})

    @tool
    async def submit(self, params: SubmitValue) -> ToolOutput:
        """Submit the final integer; ends the episode (reward 1 if it equals the target, else 0)."""
        correct = params.value == self.target
        text = "Correct!" if correct else f"Incorrect: the target was {self.target}."
        return text_output(
            text, reward=1.0 if correct else 0.0, finished=True, metadata={"correct": correct}
        )

    @tool
    async def configure(self, params: ConfigureInput) -> ToolOutput:
        """Validate and echo settings (no effect on the task; reward 0)."""
        settings = params.model_dump(mode="json")
        return text_output(f"Settings accepted: {settings}", metadata={"settings": settings})
