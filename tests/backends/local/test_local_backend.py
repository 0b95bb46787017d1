"""``LocalBackend``: the SDK's environments in-process, behaving like its HTTP server.

The bundled environments cover the protocol; ``LocalProbe`` below adds what
they do not: sync tools and lifecycle hooks (counted per task), secrets, a
failing constructor and setup, values JSON would change (tuples, inf/nan),
and tools that only return when several calls are in flight at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402 - after the SDK's environment is set
    Environment,
    GroupCandidate,
    ImageBlock,
    JSONObject,
    Message,
    ReasoningBlock,
    Split,
    TextBlock,
    ToolCallBlock,
    ToolOutput,
    ToolResultBlock,
    tool,
)
from pydantic import BaseModel  # noqa: E402

from ors_gym.backends.base import Backend  # noqa: E402
from ors_gym.backends.http import HttpBackend  # noqa: E402
from ors_gym.backends.local import LocalBackend  # noqa: E402
from ors_gym.errors import (  # noqa: E402
    OrsError,
    OrsRequestError,
    OrsServerError,
    OrsSessionExpired,
    OrsToolError,
)
from ors_gym.protocol import CallResult, RunToolError, RunToolSuccess, parse  # noqa: E402
from ors_gym.protocol import ImageBlock as OrsImageBlock  # noqa: E402
from ors_gym.protocol import Message as OrsMessage  # noqa: E402
from ors_gym.protocol import TextBlock as OrsTextBlock  # noqa: E402
from ors_gym.protocol import ToolOutput as OrsToolOutput  # noqa: E402
from ors_gym.serving import ServerThread  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
ECHO = "ors_gym.envs.testing.echo:Echo"
BUNDLED_SPECS = [
    "ors_gym.envs.gridworld:GridWorld",
    "ors_gym.envs.math:Math",
    "ors_gym.envs.qa:QA",
    "ors_gym.envs.counter:Counter",
    "ors_gym.envs.toolbox:Toolbox",
    ECHO,
]

# -- a probe environment for what the bundled ones do not cover ------------------------------

#: task token -> how often each lifecycle hook ran for sessions of that task.
HOOKS: dict[str, Counter[str]] = {}
#: Released by the last of the calls a test expects in flight together.
BARRIERS: dict[str, threading.Barrier] = {}
#: The async twin: arrivals per token, and the event the last arrival sets.
COUNTS: Counter[str] = Counter()
ARRIVALS: dict[str, asyncio.Event] = {}


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class Text(BaseModel):
    text: str


class Name(BaseModel):
    name: str


class Token(BaseModel):
    token: str


class LocalProbe(Environment):
    """Sync and async tools, counted hooks, secrets and awkward values."""

    #: Set by a test that checks a tool calling its own backend fails instead of hanging.
    backend: ClassVar[LocalBackend | None] = None

    def __init__(
        self, task_spec: JSONObject | None = None, secrets: dict[str, str] | None = None
    ) -> None:
        task_spec = task_spec or {}
        super().__init__(task_spec, secrets or {})
        if task_spec.get("fail_init"):
            raise ValueError("this task cannot be built")
        self.secrets = dict(secrets or {})
        self.token = str(task_spec.get("token", "none"))
        HOOKS.setdefault(self.token, Counter())["init"] += 1

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train", "extra"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"token": f"{split}-{i}", "tags": ("a", "b"), "n": i} for i in range(4)]

    def setup(self) -> None:  # sync on purpose: the SDK runs it in a thread
        HOOKS[self.token]["setup"] += 1
        if self.task_spec.get("fail_setup"):
            raise RuntimeError("setup exploded")

    async def teardown(self) -> None:
        HOOKS[self.token]["teardown"] += 1

    def get_prompt(self) -> list[TextBlock | ImageBlock]:
        return [
            TextBlock(text=f"probe {self.token}", detail={"pair": (1, 2), "inf": float("inf")}),
            ImageBlock(data="aGVsbG8=", mimeType="image/png"),
        ]

    @tool
    def sync_echo(self, params: Text) -> ToolOutput:
        """Echo (a sync tool: the SDK runs it via asyncio.to_thread)."""
        return ToolOutput(blocks=[TextBlock(text=params.text)], metadata={"n": 1}, reward=0.5)

    @tool
    async def async_echo(self, params: Text) -> ToolOutput:
        """Echo (an async tool: awaited on the event loop)."""
        return ToolOutput(blocks=[TextBlock(text=params.text)], metadata={"n": 2}, reward=1)

    @tool
    def sync_thread(self) -> ToolOutput:
        """Whether this sync tool ran in the main thread."""
        main = threading.current_thread() is threading.main_thread()
        return ToolOutput(blocks=[TextBlock(text=str(main))])

    @tool
    async def async_thread(self) -> ToolOutput:
        """Whether this async tool ran in the main thread."""
        main = threading.current_thread() is threading.main_thread()
        return ToolOutput(blocks=[TextBlock(text=str(main))])

    @tool
    async def odd_values(self) -> ToolOutput:
        """Values the server's JSON changes: tuples, a nested mapping, inf and nan."""
        return ToolOutput(
            blocks=[TextBlock(text="odd", detail={"t": (1, (2, 3))})],
            metadata={"t": (1, 2), "m": {"x": [1.5, float("nan")]}, "s": "x", "n": None},
            reward=float("nan"),
        )

    @tool
    def secret_digest(self, params: Name) -> ToolOutput:
        """SHA-256 of the named secret (never the secret), or 'missing'."""
        value = self.secrets.get(params.name)
        return ToolOutput(blocks=[TextBlock(text=digest(value) if value else "missing")])

    @tool
    async def hooks(self) -> ToolOutput:
        """How often each lifecycle hook ran for this task."""
        return ToolOutput(blocks=[TextBlock(text=json.dumps(dict(HOOKS[self.token])))])

    @tool
    def boom(self) -> ToolOutput:
        """Raise KeyError (whose str() is quoted, unlike its message)."""
        raise KeyError("kaput")

    @tool
    async def end(self) -> ToolOutput:
        """Finish the episode."""
        return ToolOutput(blocks=[TextBlock(text="bye")], reward=1.0, finished=True)

    @tool(concurrent=True)
    def meet_sync(self, params: Token) -> ToolOutput:
        """Return once every caller of the token's barrier arrived (worker threads)."""
        BARRIERS[params.token].wait(timeout=20)
        return ToolOutput(blocks=[TextBlock(text="met")])

    @tool(concurrent=True)
    async def meet_async(self, params: Token) -> ToolOutput:
        """Return once every caller arrived, awaiting on the event loop (one loop for all)."""
        barrier = BARRIERS[params.token]
        arrived = ARRIVALS.setdefault(params.token, asyncio.Event())
        COUNTS[params.token] += 1
        if COUNTS[params.token] == barrier.parties:
            arrived.set()
        await asyncio.wait_for(arrived.wait(), timeout=20)
        return ToolOutput(blocks=[TextBlock(text="met")])

    @tool
    async def reenter(self) -> ToolOutput:
        """Call the hosting backend synchronously from inside a tool (must fail, not hang)."""
        assert self.backend is not None
        self.backend.list_environments()
        self.backend.tasks("localprobe", "train")
        return ToolOutput(blocks=[TextBlock(text="unreachable")])


class Dialogue(Environment):
    """A conversation-shaped task (get_messages only) that scores groups."""

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["test"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"topic": "tea"}]

    def get_messages(self) -> list[Message]:
        return [
            Message(role="system", blocks=[TextBlock(text="Be brief.")]),
            Message(
                role="assistant",
                blocks=[
                    ReasoningBlock(text="look it up"),
                    ToolCallBlock(id="c1", name="lookup", input={"q": ("tea", 1)}),
                ],
            ),
            Message(
                role="user",
                blocks=[ToolResultBlock(tool_call_id="c1", blocks=[TextBlock(text="green")])],
            ),
        ]

    @tool
    async def reply(self, params: Text) -> ToolOutput:
        """Answer."""
        return ToolOutput(blocks=[TextBlock(text=params.text)], finished=True, reward=1.0)

    async def score_group(self, candidates: Sequence[GroupCandidate]) -> Sequence[float]:
        return [float(len(c.messages)) for c in candidates]


PROBE = f"{__name__}:LocalProbe"
DIALOGUE = f"{__name__}:Dialogue"


def fresh_token() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def backend() -> Iterator[LocalBackend]:
    b = LocalBackend([LocalProbe, *BUNDLED_SPECS])
    yield b
    b.close()


def open_probe(b: Backend, **spec: Any) -> tuple[str, str]:
    token = fresh_token()
    sid = b.create_session("localprobe", task_spec={"token": token, **spec})
    return sid, token


def text_of(result: CallResult) -> str:
    assert isinstance(result, RunToolSuccess), result
    block = result.output.blocks[0]
    assert isinstance(block, OrsTextBlock)
    return block.text


# -- construction --------------------------------------------------------------------------------


def test_is_a_backend_and_accepts_classes_and_specs() -> None:
    from ors_gym.envs.math import Math

    for spec in (Math, "ors_gym.envs.math:Math", [Math], ("ors_gym.envs.math:Math",)):
        b = LocalBackend(spec)
        assert isinstance(b, Backend)
        assert b.location == "in-process"
        assert b.list_environments() == ["math"]
    b = LocalBackend(["ors_gym.envs.qa:QA", Math])
    assert b.list_environments() == ["qa", "math"]  # first is the default
    assert b.environment_class("MATH") is Math


@pytest.mark.parametrize(
    ("spec", "error", "words"),
    [
        ([], ValueError, "at least one environment"),
        ("ors_gym.envs.math", ValueError, "module:Class"),
        ("ors_gym.envs.math:Nope", ValueError, "cannot load"),
        (int, TypeError, "not a subclass"),
        (["ors_gym.envs.math:Math", "ors_gym.envs.math:Math"], ValueError, "unique"),
    ],
)
def test_bad_environment_specs_say_what_is_wrong(spec: Any, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        LocalBackend(spec)


def test_environments_the_server_would_refuse_are_refused() -> None:
    class NoTools(Environment):
        @classmethod
        def list_splits(cls) -> Sequence[Split | str]:
            return ["train"]

        @classmethod
        def list_tasks(cls, split: str) -> Sequence[JSONObject]:
            return []

        def get_prompt(self) -> list[TextBlock]:
            return []

    with pytest.raises(ValueError, match="no tools defined"):
        LocalBackend(NoTools)


def test_importable_without_the_sdk_and_says_which_extra_to_install() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["openreward"] = None  # as if the `local` extra were not installed
        import ors_gym.backends.local as local
        from ors_gym.errors import OrsDependencyError
        try:
            local.LocalBackend("ors_gym.envs.math:Math")
        except OrsDependencyError as exc:
            print("MISSING:", exc)
        """
    )
    out = _python(script)
    assert "MISSING:" in out and "pip install 'ors-gym[local]'" in out


# -- discovery ---------------------------------------------------------------------------------


def test_discovery(backend: LocalBackend) -> None:
    tools = backend.tools("LocalProbe")  # case-insensitive, like the server's paths
    names = {spec.name for spec in tools.tools}
    assert {"sync_echo", "async_echo", "boom", "end"} <= names
    assert tools.terminal_tool is None
    assert tools.tool("sync_echo") is not None
    assert tools.tool("sync_echo").input_schema["properties"]["text"]["type"] == "string"  # type: ignore[index, union-attr]

    qa = backend.tools("qa")
    assert qa.terminal_tool is not None and qa.terminal_tool.name == "answer"
    assert qa.tool("answer") is None  # the terminal tool is hidden from the list

    assert [(s.name, s.type) for s in backend.splits("localprobe")] == [
        ("train", "train"),
        ("extra", "validation"),  # a bare non-standard name, converted like the server does
    ]
    tasks = backend.tasks("localprobe", "extra")
    assert tasks[1] == {"token": "extra-1", "tags": ["a", "b"], "n": 1}  # tuples read as lists
    assert backend.num_tasks("localprobe", "train") == 4
    assert backend.task("localprobe", "train", -1) == tasks[-1] | {"token": "train-3"}
    assert backend.task_range("localprobe", "train", 1, 3) == [
        backend.task("localprobe", "train", i) for i in (1, 2)
    ]
    every = backend.tasks("localprobe", "train")
    assert backend.task_range("localprobe", "train", -2) == every[-2:]


def test_returned_tasks_are_copies(backend: LocalBackend) -> None:
    task = backend.task("localprobe", "train", 0)
    task["token"] = "changed"
    backend.tasks("localprobe", "train")[0]["tags"].append("c")
    assert backend.task("localprobe", "train", 0)["token"] == "train-0"
    assert backend.tasks("localprobe", "train")[0]["tags"] == ["a", "b"]


def test_index_only_environment(backend: LocalBackend) -> None:
    with pytest.raises(OrsRequestError, match="index-based API") as info:
        backend.tasks("math", "train")
    assert info.value.status_code == 400
    assert backend.num_tasks("math", "test") == len(backend.task_range("math", "test"))
    with pytest.raises(OrsRequestError, match="Invalid index") as info:
        backend.task("math", "train", 10**6)
    assert info.value.status_code == 400


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.tasks("math", "nope"),
        lambda b: b.num_tasks("math", "nope"),
        lambda b: b.task("math", "nope", 0),
        lambda b: b.task_range("math", "nope"),
        lambda b: b.create_session("math", split="nope", index=0),
    ],
)
def test_unknown_split(backend: LocalBackend, call: Callable[[LocalBackend], Any]) -> None:
    expected = "Invalid split; math has splits: train, test"
    with pytest.raises(OrsRequestError, match=expected) as info:
        call(backend)
    assert info.value.status_code == 400


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.tools("nosuch"),
        lambda b: b.splits("nosuch"),
        lambda b: b.tasks("nosuch", "train"),
        lambda b: b.create_session("nosuch", task_spec={}),
        lambda b: b.prompt("nosuch", "no-such-session"),
        lambda b: b.call("nosuch", "no-such-session", "echo", {}),
    ],
)
def test_unknown_environment_names_the_available_ones(
    backend: LocalBackend, call: Callable[[LocalBackend], Any]
) -> None:
    with pytest.raises(OrsRequestError, match="unknown environment 'nosuch'") as info:
        call(backend)
    assert "localprobe, gridworld, math, qa, counter, toolbox, echo" in str(info.value)
    assert info.value.status_code == 404


# -- sessions ------------------------------------------------------------------------------------


def test_episode(backend: LocalBackend) -> None:
    sid, token = open_probe(backend)
    assert sid in backend.open_sessions
    prompt = backend.prompt("localprobe", sid)
    assert prompt[0] == OrsTextBlock(text=f"probe {token}", detail={"pair": [1, 2], "inf": None})
    assert prompt[1] == OrsImageBlock(data="aGVsbG8=", mimeType="image/png")
    messages = backend.messages("localprobe", sid)
    assert len(messages) == 1 and messages[0].role == "user"
    assert messages[0].blocks == prompt
    assert backend.task_tools("localprobe", sid) == backend.tools("localprobe")
    backend.ping(sid)

    sync = backend.call("localprobe", sid, "sync_echo", {"text": "hi"})
    assert sync == RunToolSuccess(
        output=OrsToolOutput(blocks=[OrsTextBlock(text="hi")], metadata={"n": 1}, reward=0.5)
    )
    async_ = backend.call("localprobe", sid, "async_echo", {"text": "yo"})
    assert isinstance(async_, RunToolSuccess)
    assert async_.output.reward == 1.0 and type(async_.output.reward) is float
    # Sync tools keep the SDK's thread hop; async ones run on the loop, which the
    # calling (here: main) thread drives itself, with no hop.
    assert text_of(backend.call("localprobe", sid, "sync_thread", {})) == "False"
    assert text_of(backend.call("localprobe", sid, "async_thread", {})) == "True"

    end = backend.call("localprobe", sid, "end", {})
    assert isinstance(end, RunToolSuccess) and end.output.finished
    after = backend.call("localprobe", sid, "sync_echo", {"text": "again"})
    assert isinstance(after, RunToolError) and after.reason == "episode_finished"
    backend.delete_session(sid)
    assert sid not in backend.open_sessions


def test_agent_mistakes_come_back_as_run_tool_errors(backend: LocalBackend) -> None:
    sid, _ = open_probe(backend)
    missing = backend.call("localprobe", sid, "nope", {})
    assert missing == RunToolError(error="'nope' is not a valid tool", reason="not_found")
    bad = backend.call("localprobe", sid, "sync_echo", {"text": 3})
    assert isinstance(bad, RunToolError) and bad.reason == "input_validation"
    assert "string_type" in bad.error
    # A mistake does not end the episode.
    assert text_of(backend.call("localprobe", sid, "sync_echo", {"text": "ok"})) == "ok"


def test_values_read_as_after_the_servers_json(backend: LocalBackend) -> None:
    sid, _ = open_probe(backend)
    result = backend.call("localprobe", sid, "odd_values", {})
    assert isinstance(result, RunToolSuccess)
    assert result.output.reward is None  # nan serialises as null
    assert result.output.metadata == {"t": [1, 2], "m": {"x": [1.5, None]}, "s": "x", "n": None}
    assert result.output.blocks[0].detail == {"t": [1, [2, 3]]}
    # Field for field what parsing the server's JSON gives, including the fields set.
    reparsed = parse(CallResult, json.loads(result.model_dump_json()), what="test")
    assert reparsed == result
    assert reparsed.model_fields_set == result.model_fields_set
    assert reparsed.output.model_fields_set == result.output.model_fields_set
    assert reparsed.output.blocks[0].model_fields_set == result.output.blocks[0].model_fields_set
    assert result.model_dump() == reparsed.model_dump()


def test_arguments_are_sent_as_json_would_send_them(backend: LocalBackend) -> None:
    sid = backend.create_session("echo", split="train", index=0)
    result = backend.call("echo", sid, "echo", {"text": "ab", "repeat": np.int64(2)})
    assert text_of(result) == "abab"
    with pytest.raises(TypeError, match="arguments of tool call 'echo' cannot be sent as JSON"):
        backend.call("echo", sid, "echo", {"text": object()})


def test_secrets_reach_the_instance(backend: LocalBackend) -> None:
    sid = backend.create_session(
        "localprobe", task_spec={"token": fresh_token()}, secrets={"API_KEY": "s3cret"}
    )
    assert text_of(backend.call("localprobe", sid, "secret_digest", {"name": "API_KEY"})) == (
        digest("s3cret")
    )
    assert text_of(backend.call("localprobe", sid, "secret_digest", {"name": "OTHER"})) == "missing"
    with pytest.raises(TypeError, match="str names to str values") as info:
        backend.create_session("localprobe", task_spec={}, secrets={"K": 123})  # type: ignore[dict-item]
    assert "123" not in str(info.value)


def test_task_spec_is_detached_from_the_callers_dict(backend: LocalBackend) -> None:
    spec = {"token": fresh_token(), "nested": {"a": (1, 2)}}
    sid = backend.create_session("localprobe", task_spec=spec)
    spec["token"] = "changed"
    assert text_of(backend.call("localprobe", sid, "hooks", {})) == json.dumps(
        {"init": 1, "setup": 1}
    )


def test_setup_and_teardown_run_once_each(backend: LocalBackend) -> None:
    sid, token = open_probe(backend)
    for _ in range(3):
        backend.call("localprobe", sid, "async_echo", {"text": "x"})
    backend.prompt("localprobe", sid)
    assert HOOKS[token] == Counter(init=1, setup=1)
    backend.delete_session(sid)
    backend.delete_session(sid)  # idempotent
    backend.delete_session("never-existed")
    assert HOOKS[token] == Counter(init=1, setup=1, teardown=1)


def test_session_by_split_and_index(backend: LocalBackend) -> None:
    sid = backend.create_session("localprobe", split="extra", index=-1)
    assert backend.prompt("localprobe", sid)[0].text == "probe extra-3"  # type: ignore[union-attr]
    with pytest.raises(OrsRequestError, match="Invalid index") as info:
        backend.create_session("localprobe", split="train", index=99)
    assert info.value.status_code == 400
    with pytest.raises(ValueError, match="not both and not neither"):
        backend.create_session("localprobe")
    with pytest.raises(ValueError, match="not both and not neither"):
        backend.create_session("localprobe", task_spec={}, split="train", index=0)
    with pytest.raises(ValueError, match="together"):
        backend.create_session("localprobe", split="train")
    opened = backend.open_sessions
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'tool_set'; its "
                       r"keywords are task_spec, split, index, secrets, toolset"):
        backend.create_session("localprobe", split="train", index=0, tool_set="codex")  # type: ignore[call-arg]
    assert backend.open_sessions == opened  # refused before anything was opened


def test_gone_sessions_are_expired(backend: LocalBackend) -> None:
    sid, _ = open_probe(backend)
    backend.delete_session(sid)
    for call in (
        lambda: backend.prompt("localprobe", sid),
        lambda: backend.messages("localprobe", sid),
        lambda: backend.task_tools("localprobe", sid),
        lambda: backend.call("localprobe", sid, "async_echo", {"text": "x"}),
        lambda: backend.ping(sid),
    ):
        with pytest.raises(OrsSessionExpired, match="Active environment not found") as info:
            call()
        assert info.value.session_id == sid


def test_an_exception_in_a_tool_is_a_tool_error(backend: LocalBackend) -> None:
    sid, _ = open_probe(backend)
    with pytest.raises(OrsToolError) as info:
        backend.call("localprobe", sid, "boom", {})
    # The server's SSE error event carries str(exc); so does the message.
    assert f"raised: {KeyError('kaput')}." in info.value.message
    assert isinstance(info.value.__cause__, KeyError)  # in-process, the real exception too
    assert info.value.tool == "boom" and info.value.session_id == sid
    # The session lives on.
    assert text_of(backend.call("localprobe", sid, "sync_echo", {"text": "still"})) == "still"


def test_failed_constructor_is_a_server_error(backend: LocalBackend) -> None:
    with pytest.raises(OrsServerError, match="ValueError: this task cannot be built") as info:
        backend.create_session("localprobe", task_spec={"fail_init": True})
    assert info.value.status_code == 500
    assert backend.open_sessions == frozenset()


def test_failed_setup_surfaces_on_the_next_request(backend: LocalBackend) -> None:
    sid, token = open_probe(backend, fail_setup=True)
    for call in (
        lambda: backend.prompt("localprobe", sid),
        lambda: backend.messages("localprobe", sid),
        lambda: backend.task_tools("localprobe", sid),
        lambda: backend.call("localprobe", sid, "async_echo", {"text": "x"}),
    ):
        with pytest.raises(OrsServerError, match="RuntimeError: setup exploded") as info:
            call()
        assert info.value.status_code == 500
    backend.ping(sid)  # like the server: the session exists until deleted
    backend.delete_session(sid)
    assert HOOKS[token] == Counter(init=1, setup=1, teardown=1)


def test_close_tears_down_every_session_and_the_backend_stays_usable() -> None:
    b = LocalBackend(LocalProbe)
    opened = [open_probe(b) for _ in range(3)]
    b.close()
    assert all(HOOKS[token]["teardown"] == 1 for _, token in opened)
    with pytest.raises(OrsSessionExpired):
        b.call("localprobe", opened[0][0], "async_echo", {"text": "x"})
    b.close()  # twice is fine
    sid, _ = open_probe(b)
    assert text_of(b.call("localprobe", sid, "sync_echo", {"text": "again"})) == "again"
    with b:
        pass
    assert b.open_sessions == frozenset()


def test_task_tools_include_the_tasks_own_tools(backend: LocalBackend) -> None:
    shared = {t.name for t in backend.tools("toolbox").tools}
    sid = backend.create_session("toolbox", split="train", index=0)
    own = {t.name for t in backend.task_tools("toolbox", sid).tools}
    assert shared < own
    extra = own - shared
    assert extra <= {"add", "multiply", "negate"}
    name = sorted(extra)[0]
    schema = backend.task_tools("toolbox", sid).tool(name).input_schema  # type: ignore[union-attr]
    args = {key: 1 for key in schema["properties"]}  # type: ignore[index]
    assert isinstance(backend.call("toolbox", sid, name, args), RunToolSuccess)


def test_terminal_tool_ends_the_episode(backend: LocalBackend) -> None:
    sid = backend.create_session("qa", split="train", index=0)
    term = backend.task_tools("qa", sid).terminal_tool
    assert term is not None and term.arg == "answer"
    result = backend.call("qa", sid, term.name, {term.arg: "surely wrong"})
    assert isinstance(result, RunToolSuccess) and result.output.finished
    assert backend.call("qa", sid, term.name, {term.arg: "x"}).reason == "episode_finished"  # type: ignore[union-attr]

    sid = backend.create_session("counter", split="train", index=0)
    term = backend.tools("counter").terminal_tool
    assert term is not None and term.arg is None
    done = backend.call("counter", sid, term.name, {})
    assert isinstance(done, RunToolSuccess) and done.output.finished


def test_images_come_back_as_image_blocks(backend: LocalBackend) -> None:
    sid = backend.create_session("echo", split="train", index=0)
    result = backend.call("echo", sid, "image", {"width": 5, "height": 3})
    assert isinstance(result, RunToolSuccess)
    image = result.output.blocks[1]
    assert isinstance(image, OrsImageBlock) and image.mimeType == "image/png"
    assert result.output.metadata == {"width": 5, "height": 3}


def test_score_group(backend: LocalBackend) -> None:
    sid, _ = open_probe(backend)
    with pytest.raises(OrsRequestError, match="does not implement score_group") as info:
        backend.score_group("localprobe", sid, [])
    assert info.value.status_code == 404

    b = LocalBackend(Dialogue)
    sid = b.create_session("dialogue", split="test", index=0)
    assert b.tools("dialogue").supports_score_group
    one = {"role": "assistant", "blocks": [{"type": "text", "text": "hi"}]}
    scores = b.score_group("dialogue", sid, [{"messages": [one]}, {"messages": [one, one]}])
    assert [s.reward for s in scores] == [1.0, 2.0]
    typed = OrsMessage(role="assistant", blocks=[OrsTextBlock(text="hi")])
    assert b.score_group("dialogue", sid, [{"messages": [typed]}])[0].reward == 1.0
    with pytest.raises(OrsRequestError) as info:
        b.score_group("dialogue", sid, [{"messages": "not a list"}])
    assert info.value.status_code == 422
    b.close()


def test_conversation_shaped_prompt(backend: LocalBackend) -> None:
    b = LocalBackend(Dialogue)
    sid = b.create_session("dialogue", split="test", index=0)
    messages = b.messages("dialogue", sid)
    assert [m.role for m in messages] == ["system", "assistant", "user"]
    call = messages[1].blocks[1]
    assert call.type == "tool_call" and call.input == {"q": ["tea", 1]}
    # /prompt serves the SDK's flattened rendering of the conversation.
    texts = [block.text for block in b.prompt("dialogue", sid)]  # type: ignore[union-attr]
    assert texts[0] == "[system]" and "green" in texts
    b.close()


def test_arguments_may_be_any_mapping(backend: LocalBackend) -> None:
    from types import MappingProxyType

    sid, _ = open_probe(backend)
    result = backend.call("localprobe", sid, "sync_echo", MappingProxyType({"text": "ro"}))
    assert text_of(result) == "ro"


# -- event loops and threads ----------------------------------------------------------------------


def test_works_inside_a_running_event_loop(backend: LocalBackend) -> None:
    async def main() -> list[str]:
        outer = asyncio.get_running_loop()
        sid, _ = open_probe(backend)  # sync calls from a coroutine, as in Jupyter
        texts = [text_of(backend.call("localprobe", sid, "sync_echo", {"text": "a"}))]
        texts.append(text_of(backend.call("localprobe", sid, "async_echo", {"text": "b"})))
        assert asyncio.get_running_loop() is outer  # the caller's loop is restored
        await asyncio.sleep(0)  # and still runs
        backend.delete_session(sid)
        return texts

    assert asyncio.run(main()) == ["a", "b"]
    # The same backend keeps working from plain code afterwards.
    sid, _ = open_probe(backend)
    assert text_of(backend.call("localprobe", sid, "async_echo", {"text": "c"})) == "c"


@pytest.mark.parametrize("tool_name", ["meet_sync", "meet_async"])
def test_calls_from_four_threads_run_at_once(backend: LocalBackend, tool_name: str) -> None:
    # Each call returns only once all four are in flight: serialised calls would break the
    # barrier (its timeout) and come back as tool errors instead of "met".
    token = fresh_token()
    BARRIERS[token] = threading.Barrier(4)
    results: dict[int, Any] = {}

    def worker(i: int) -> None:
        try:
            sid, _ = open_probe(backend)
            results[i] = text_of(backend.call("localprobe", sid, tool_name, {"token": token}))
            results[i] += text_of(backend.call("localprobe", sid, "async_echo", {"text": "!"}))
            backend.delete_session(sid)
        except BaseException as exc:  # reported below
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == {i: "met!" for i in range(4)}
    assert backend.open_sessions == frozenset()


def test_four_threads_share_one_session(backend: LocalBackend) -> None:
    sid, _ = open_probe(backend)
    results: list[Any] = []

    def worker(i: int) -> None:
        for j in range(20):
            result = backend.call("localprobe", sid, "sync_echo", {"text": f"{i}.{j}"})
            results.append(text_of(result))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == sorted(f"{i}.{j}" for i in range(4) for j in range(20))


def test_a_tool_calling_its_own_backend_fails_instead_of_hanging() -> None:
    b = LocalBackend(LocalProbe)
    LocalProbe.backend = b
    try:
        sid, _ = open_probe(b)
        with pytest.raises(OrsToolError, match="would deadlock"):
            b.call("localprobe", sid, "reenter", {})
        assert text_of(b.call("localprobe", sid, "async_echo", {"text": "ok"})) == "ok"
    finally:
        LocalProbe.backend = None
        b.close()


def test_sessions_closed_at_interpreter_exit_are_torn_down() -> None:
    # An env's finaliser or an atexit handler may close the backend after the worker
    # threads the SDK runs sync hooks in are gone; teardown() must still run.
    script = textwrap.dedent(
        """
        import atexit
        from openreward.environments import Environment, TextBlock, ToolOutput, tool
        from ors_gym.backends.local import LocalBackend

        class Exiting(Environment):
            @classmethod
            def list_splits(cls):
                return ["train"]

            @classmethod
            def list_tasks(cls, split):
                return [{}]

            def get_prompt(self):
                return [TextBlock(text="hi")]

            def teardown(self):  # sync: normally run in a worker thread
                print("TEARDOWN", flush=True)

            @tool
            async def noop(self) -> ToolOutput:
                return ToolOutput(blocks=[])

        backend = LocalBackend(Exiting)
        backend.create_session("exiting", task_spec={})
        atexit.register(backend.close)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, OPENREWARD_DISABLE_UPDATE_CHECK="1"), check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["TEARDOWN"]
    assert "failed" not in proc.stderr


# -- pickling and worker processes --------------------------------------------------------------


def test_pickles_as_its_environment_specs(backend: LocalBackend) -> None:
    sid, _ = open_probe(backend)
    copy = pickle.loads(pickle.dumps(backend))
    assert copy.list_environments() == backend.list_environments()
    assert copy.open_sessions == frozenset()
    with pytest.raises(OrsSessionExpired):
        copy.prompt("localprobe", sid)  # sessions stay with the original
    new_sid, _ = open_probe(copy)
    assert text_of(copy.call("localprobe", new_sid, "async_echo", {"text": "x"})) == "x"
    assert text_of(backend.call("localprobe", sid, "async_echo", {"text": "y"})) == "y"
    copy.close()


class TinyEchoEnv(gym.Env[np.ndarray, int]):
    """A minimal Gym env over a LocalBackend (OrsEnv is tested elsewhere)."""

    observation_space = gym.spaces.Box(0, 1e9, shape=(1,), dtype=np.float64)
    action_space = gym.spaces.Discrete(4)  # type: ignore[assignment]

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend
        self.sid: str | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if self.sid is not None:
            self.backend.delete_session(self.sid)
        self.sid = self.backend.create_session("echo", split="train", index=0)
        text = self.backend.prompt("echo", self.sid)[0].text  # type: ignore[union-attr]
        return np.array([len(text)], dtype=np.float64), {"pid": os.getpid()}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self.sid is not None
        result = self.backend.call(
            "echo", self.sid, "echo", {"text": "ab", "repeat": int(action) + 1}
        )
        assert isinstance(result, RunToolSuccess)
        length = float(result.output.metadata["length"])  # type: ignore[index]
        return np.array([length]), 0.0, False, False, {"pid": os.getpid()}

    def close(self) -> None:
        # Only this env's session: gymnasium builds and closes a dummy env in the parent.
        if self.sid is not None:
            self.backend.delete_session(self.sid)
            self.sid = None


@pytest.mark.parametrize(
    "context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)]
)
def test_async_vector_env_workers(context: str) -> None:
    backend = LocalBackend(ECHO)
    # Used here first, so a forked worker inherits a live loop it must not touch.
    sid = backend.create_session("echo", split="train", index=0)
    backend.call("echo", sid, "echo", {"text": "parent"})
    envs = gym.vector.AsyncVectorEnv(
        [lambda: TinyEchoEnv(backend)] * 2, context=context, shared_memory=False
    )
    try:
        _, infos = envs.reset(seed=0)
        assert os.getpid() not in set(infos["pid"])
        obs, _, _, _, _ = envs.step(np.array([0, 3]))
        assert obs[:, 0].tolist() == [2.0, 8.0]
    finally:
        envs.close()
    # The parent's session is untouched by the workers.
    assert text_of(backend.call("echo", sid, "echo", {"text": "still"})) == "still"
    backend.close()


# -- quiet ---------------------------------------------------------------------------------


def test_no_line_per_call_on_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    b = LocalBackend(ECHO)
    sid = b.create_session("echo", split="train", index=0)
    capfd.readouterr()
    for i in range(50):
        b.call("echo", sid, "echo", {"text": str(i)})
    b.delete_session(sid)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    b.close()


_LOGGING_SCRIPT = """
import openreward.environments  # the user imported the SDK before ors_gym
from ors_gym.backends.local import LocalBackend
b = LocalBackend("ors_gym.envs.testing.echo:Echo")
sid = b.create_session("echo", split="train", index=0)
for i in range(50):
    b.call("echo", sid, "echo", {"text": str(i)})
print("DONE")
"""


def test_quiet_even_if_the_sdk_was_imported_first() -> None:
    out = _python(_LOGGING_SCRIPT, OPENREWARD_LOG_LEVEL=None)
    assert out.strip().splitlines() == ["DONE"]


def test_an_explicit_log_level_is_respected() -> None:
    out = _python(_LOGGING_SCRIPT, OPENREWARD_LOG_LEVEL="INFO")
    assert out.count("tool_call_completed") == 50


def _python(script: str, **env_changes: str | None) -> str:
    env = dict(os.environ, OPENREWARD_DISABLE_UPDATE_CHECK="1")
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# -- parity with the real HTTP server -----------------------------------------------------


@pytest.fixture(scope="module")
def parity_server() -> Iterator[ServerThread]:
    with ServerThread([PROBE, *BUNDLED_SPECS, DIALOGUE]) as srv:
        yield srv


def _outcome(fn: Callable[[], Any]) -> Any:
    """A call's value, or its error's kind (type, status, the server's detail)."""
    try:
        value = fn()
    except OrsError as exc:
        return ("error", type(exc).__name__, getattr(exc, "status_code", None))
    if isinstance(value, list):
        return [v.model_dump() if isinstance(v, BaseModel) else v for v in value]
    return value.model_dump() if isinstance(value, BaseModel) else value


def _script(b: Backend) -> list[Any]:
    """The same calls, in order, against either backend."""
    out: list[Any] = [b.list_environments()]
    for env in b.list_environments():
        out += [_outcome(partial(b.tools, env)), _outcome(partial(b.splits, env))]
        split = b.splits(env)[0].name
        for fn in (
            partial(b.tasks, env, split),
            partial(b.num_tasks, env, split),
            partial(b.task, env, split, 0),
            partial(b.task, env, split, -1),
            partial(b.task, env, split, 10**6),
            partial(b.task_range, env, split, 1, 3),
            partial(b.task_range, env, split, -2, None),
            partial(b.tasks, env, "nope"),
        ):
            out.append(_outcome(fn))
    out.append(_outcome(lambda: b.tools("nosuch")))

    def episode(env: str, calls: list[tuple[str, dict[str, Any]]], **create: Any) -> None:
        try:
            sid = b.create_session(env, **create)
        except OrsError as exc:
            out.append(("create failed", type(exc).__name__, getattr(exc, "status_code", None)))
            return
        out.extend(
            _outcome(fn)
            for fn in (
                lambda: b.prompt(env, sid),
                lambda: b.messages(env, sid),
                lambda: b.task_tools(env, sid),
            )
        )
        for name, args in calls:
            out.append(_outcome(partial(b.call, env, sid, name, args)))
        b.delete_session(sid)
        out.append(_outcome(lambda: b.call(env, sid, calls[0][0], calls[0][1])))
        out.append(_outcome(lambda: b.ping(sid)))

    token = {"token": "parity"}
    episode(
        "localprobe",
        [
            ("sync_echo", {"text": "hi"}),
            ("async_echo", {"text": "yo"}),
            ("odd_values", {}),
            ("secret_digest", {"name": "KEY"}),
            ("sync_echo", {"text": 5}),
            ("nope", {}),
            ("boom", {}),
            ("end", {}),
            ("sync_echo", {"text": "late"}),
        ],
        task_spec=token,
        secrets={"KEY": "value"},
    )
    episode("localprobe", [("sync_echo", {"text": "x"})], task_spec={**token, "fail_setup": True})
    episode("localprobe", [("sync_echo", {"text": "x"})], task_spec={"fail_init": True})
    episode("localprobe", [("async_echo", {"text": "x"})], split="nope", index=0)
    episode("localprobe", [("async_echo", {"text": "x"})], split="extra", index=99)
    episode(
        "echo",
        [
            ("echo", {"text": "ab " * 3000, "repeat": 2}),  # several SSE chunks over HTTP
            ("image", {"width": 7, "height": 4}),
            ("fail", {"message": "on purpose"}),
            ("finish", {"reward": 0.25}),
            ("echo", {"text": "late"}),
        ],
        split="train",
        index=1,
    )
    episode("gridworld", [("move", {"direction": "up"}), ("move", {"direction": "left"}),
                          ("move", {"direction": "diagonal"})], split="train", index=0)
    episode("math", [("submit", {"answer": 1.5}), ("submit", {"answer": 2})],
            split="test", index=-1)
    episode("qa", [("hint", {}), ("answer", {"answer": "no idea"})], split="train", index=0)
    episode("counter", [("increment", {"amount": 2}), ("decrement", {}), ("done", {})],
            split="train", index=0)
    episode("dialogue", [("reply", {"text": "green"})], split="test", index=0)
    sid = b.create_session("dialogue", split="test", index=0)
    candidate = {"messages": [{"role": "assistant", "blocks": [{"type": "text", "text": "x"}]}]}
    out.append(_outcome(partial(b.score_group, "dialogue", sid, [candidate, candidate])))
    b.delete_session(sid)
    episode("toolbox", [("add", {"a": 1, "b": 2}), ("negate", {"x": 3}),
                        ("configure", {"mode": "fast", "precision": {"digits": 3}}),
                        ("submit", {"value": 0})], split="train", index=0)
    return out


def test_same_answers_as_the_http_server(parity_server: ServerThread) -> None:
    local = LocalBackend([PROBE, *BUNDLED_SPECS, DIALOGUE])
    http = HttpBackend(parity_server.url, keepalive_interval=None, max_retries=0)
    try:
        local_answers = _script(local)
        http_answers = _script(http)
    finally:
        local.close()
        http.close()
    assert len(local_answers) == len(http_answers)
    for i, (mine, theirs) in enumerate(zip(local_answers, http_answers, strict=True)):
        assert mine == theirs, f"answer {i} differs"
    # The script exercised what it claims to.
    flat = json.dumps(local_answers, default=str)
    for needle in ("episode_finished", "not_found", "input_validation", "OrsToolError",
                   "OrsServerError", "OrsSessionExpired", "OrsRequestError", '"image"'):
        assert needle in flat, needle


def test_error_messages_carry_the_servers_words(parity_server: ServerThread) -> None:
    local = LocalBackend([PROBE, *BUNDLED_SPECS, DIALOGUE])
    http = HttpBackend(parity_server.url, keepalive_interval=None, max_retries=0)
    try:
        for b in (local, http):
            sid = b.create_session("echo", split="train", index=0)
            with pytest.raises(OrsToolError, match=r"raised.*: on purpose"):
                b.call("echo", sid, "fail", {"message": "on purpose"})
            bad = b.create_session("localprobe", task_spec={"fail_setup": True, "token": "m"})
            with pytest.raises(OrsServerError, match="RuntimeError: setup exploded"):
                b.prompt("localprobe", bad)
            with pytest.raises(OrsRequestError, match="Invalid split"):
                b.tasks("math", "nope")
            with pytest.raises(OrsRequestError, match="Invalid index"):
                b.task("math", "test", 10**6)
            b.delete_session(sid)
            with pytest.raises(OrsSessionExpired, match="Active environment not found"):
                b.call("echo", sid, "echo", {"text": "x"})
    finally:
        local.close()
        http.close()
