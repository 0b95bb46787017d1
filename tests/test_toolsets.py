"""Session toolsets over both backends: listed tools, calls, terminal precedence, errors.

``Workshop`` has a ``sandbox`` that runs commands with
``asyncio.create_subprocess_shell`` in a temporary folder, so the SDK's own
``codex`` toolset (one ``bash`` tool on ``self.sandbox``) works without a
network. ``Verdict`` is a test toolset with its own terminal tool, registered
in the SDK's ``BUILTIN_TOOLSETS`` for the test that needs it.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402 - after the SDK's environment is set
    Environment,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
    terminal,
    tool,
)
from openreward.environments.toolset import Toolset  # noqa: E402
from openreward.toolsets import BUILTIN_TOOLSETS  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from ors_gym.backends.http import HttpBackend  # noqa: E402
from ors_gym.backends.local import LocalBackend  # noqa: E402
from ors_gym.env import OrsEnv  # noqa: E402
from ors_gym.errors import OrsRequestError  # noqa: E402
from ors_gym.protocol import ListToolsOutput  # noqa: E402
from ors_gym.serving import ServerThread  # noqa: E402


class _Shell:
    """A sandbox stand-in: ``run`` executes a shell command in a temporary folder."""

    def __init__(self, root: str) -> None:
        self.root = root

    async def run(self, command: str, timeout: float | None = None, **_: Any) -> tuple[str, int]:
        proc = await asyncio.create_subprocess_shell(
            command, cwd=self.root, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _err = await asyncio.wait_for(proc.communicate(), timeout or 30.0)
        return out.decode(), int(proc.returncode or 0)


class Command(BaseModel):
    command: str


class Answer(BaseModel):
    answer: str


class Workshop(Environment):
    """Make ``done.txt``; ``grade`` (terminal) rewards 1 if it exists."""

    def __init__(
        self, task_spec: JSONObject | None = None, secrets: dict[str, str] | None = None
    ) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self.folder = tempfile.mkdtemp(prefix="ors-workshop-")
        self.sandbox = _Shell(self.folder)

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": 0}]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="create a file named done.txt")]

    @tool
    async def bash(self, params: Command) -> ToolOutput:
        """The environment's own bash, which a session toolset's bash replaces."""
        return ToolOutput(blocks=[TextBlock(text="environment bash")])

    @terminal
    @tool
    async def grade(self, params: Answer) -> ToolOutput:
        """Reward 1 if done.txt exists; ends the episode."""
        import os

        done = os.path.exists(os.path.join(self.folder, "done.txt"))
        return ToolOutput(blocks=[TextBlock(text=f"graded {params.answer}")],
                          reward=1.0 if done else 0.0, finished=True)

    async def teardown(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


class Verdict(Toolset):
    """A session toolset with its own terminal tool."""

    @classmethod
    def name(cls) -> str:
        return "ors-test-verdict"

    @tool
    async def where(self) -> ToolOutput:
        """The sandbox's working folder."""
        out, _code = await self.sandbox.run("pwd")
        return ToolOutput(blocks=[TextBlock(text=out.strip())])

    @terminal
    @tool
    async def verdict(self, params: Answer) -> ToolOutput:
        """The toolset's terminal tool: reward 0.25, ends the episode."""
        return ToolOutput(blocks=[TextBlock(text=f"verdict {params.answer}")], reward=0.25,
                          finished=True)


@pytest.fixture(scope="module")
def workshop_url() -> Iterator[str]:
    with ServerThread([Workshop]) as srv:
        yield srv.url


@pytest.fixture(params=["http", "local"])
def backend(request: pytest.FixtureRequest, workshop_url: str) -> Iterator[Any]:
    made = HttpBackend(workshop_url) if request.param == "http" else LocalBackend(Workshop)
    with made:
        yield made


@pytest.fixture
def verdict_toolset(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(BUILTIN_TOOLSETS, Verdict.name(), Verdict)
    return Verdict.name()


def _names(tools: ListToolsOutput) -> list[str]:
    return [t.name for t in tools.tools]


def test_toolset_tools_join_the_session(backend: Any) -> None:
    sid = backend.create_session("workshop", split="train", index=0, toolset="codex")
    tools = backend.task_tools("workshop", sid)
    assert _names(tools).count("bash") == 1
    bash = next(t for t in tools.tools if t.name == "bash")
    assert "own bash" not in (bash.description or "")  # the toolset's replaces it
    assert tools.terminal_tool is not None and tools.terminal_tool.name == "grade"
    plain = backend.create_session("workshop", split="train", index=0)
    env_bash = next(t for t in backend.task_tools("workshop", plain).tools if t.name == "bash")
    assert "own bash" in (env_bash.description or "")


def test_toolset_call_runs_in_the_sandbox(backend: Any) -> None:
    sid = backend.create_session("workshop", split="train", index=0, toolset="codex")
    made = backend.call("workshop", sid, "bash", {"command": "touch done.txt && echo made"})
    text = made.output.blocks[0].text
    assert made.ok and "made" in text and "(exit 0)" in text
    graded = backend.call("workshop", sid, "grade", {"answer": "ok"})
    assert graded.ok and graded.output.reward == 1.0 and graded.output.finished


def test_toolset_terminal_takes_precedence(backend: Any, verdict_toolset: str) -> None:
    sid = backend.create_session("workshop", split="train", index=0, toolset=verdict_toolset)
    tools = backend.task_tools("workshop", sid)
    assert tools.terminal_tool is not None and tools.terminal_tool.name == "verdict"
    assert "where" in _names(tools) and "verdict" not in _names(tools)
    where = backend.call("workshop", sid, "where", {})
    assert where.ok and "ors-workshop-" in where.output.blocks[0].text


def test_same_tools_over_http_and_in_process(workshop_url: str, verdict_toolset: str) -> None:
    answers = []
    for backend in (HttpBackend(workshop_url), LocalBackend(Workshop)):
        with backend:
            for toolset in ("codex", verdict_toolset):
                sid = backend.create_session("workshop", split="train", index=0,
                                             toolset=toolset)
                answers.append(backend.task_tools("workshop", sid).model_dump(mode="json"))
    assert answers[:2] == answers[2:]


@pytest.mark.parametrize("kind", ["http", "local"])
def test_env_option_and_terminal_rule(kind: str, workshop_url: str, verdict_toolset: str) -> None:
    where: dict[str, Any] = (
        {"base_url": workshop_url, "env_name": "workshop"} if kind == "http"
        else {"env_class": Workshop}
    )
    with OrsEnv(toolset="codex", **where) as env:
        env.reset()
        assert "bash" in _names(env.tools) and env.tools.terminal_tool.name == "grade"  # type: ignore[union-attr]
        env.step({"tool_calls": [{"name": "bash", "arguments": {"command": "touch done.txt"}}]})
        _, reward, terminated, _, _ = env.step("I am done")  # no tool call: the terminal tool
        assert terminated and reward == 1.0
    with OrsEnv(toolset=verdict_toolset, **where) as env:
        env.reset()
        _, reward, terminated, _, _ = env.step("my verdict")
        assert terminated and reward == 0.25


def test_unknown_toolset(backend: Any) -> None:
    with pytest.raises(OrsRequestError) as err:
        backend.create_session("workshop", split="train", index=0, toolset="nosuch")
    assert err.value.status_code == 400
    message = str(err.value)
    assert "unknown toolset 'nosuch'" in message and "codex" in message and "cli" in message
    with pytest.raises(TypeError, match="toolset"):
        backend.create_session("workshop", split="train", index=0, toolset=3)


def test_messages_over_both_backends(backend: Any) -> None:
    sid = backend.create_session("workshop", split="train", index=0)
    messages = backend.messages("workshop", sid)
    assert [m.role for m in messages] == ["user"]
    assert messages[0].blocks[0].text == "create a file named done.txt"
