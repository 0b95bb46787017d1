"""ors_gym.mcp with the official mcp client: tools and schemas, calls reaching a real ORS
environment (in-process and over HTTP), images, ``_meta``, the error after the end, the
endpoint's release (episode end, disconnect, idle time on a hand-moved clock), many
endpoints at once, ``tools/list_changed`` and the stdio relay."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

mcp = pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, types  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from ors_gym import AsyncOrsEnv  # noqa: E402
from ors_gym.backends.local import AsyncLocalBackend  # noqa: E402
from ors_gym.envs import BUNDLED  # noqa: E402
from ors_gym.mcp import McpServer  # noqa: E402

COUNTER = BUNDLED["Counter"]


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(fn())  # type: ignore[arg-type]


@asynccontextmanager
async def client(url: str, on_message: Any = None) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write, _), \
            ClientSession(read, write, message_handler=on_message) as session:
        await session.initialize()
        yield session


class Clock:
    """A clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_tools_calls_and_meta_reach_the_environment() -> None:
    async def main() -> None:
        server = McpServer()
        async with server.serve():
            backend = AsyncLocalBackend(COUNTER)  # shared: it counts the open sessions
            env = AsyncOrsEnv(backend=backend)
            ep = await server.open(env, options={"task_spec": {"target": 3}})
            assert "Make it equal 3" in ep.prompt
            async with client(ep.url) as s:
                listed = {t.name: t for t in (await s.list_tools()).tools}
                assert set(listed) == {"increment", "decrement", "done"}  # terminal callable
                assert listed["increment"].inputSchema["properties"]["amount"]["type"] == (
                    "integer")
                got = await s.call_tool("increment", {"amount": 2},
                                        meta={"ors/call_id": "call_abc"})
                assert [c.text for c in got.content if c.type == "text"] == [
                    "The counter is now 2."]
                assert got.structuredContent is None and not got.isError
                assert got.meta == {"ors/reward": 0.0, "ors/finished": False,
                                    "ors/call_id": "call_abc"}
                bad = await s.call_tool("increment", {"amount": 99})  # refused by the env
                assert bad.isError and bad.meta["ors/finished"] is False
                await s.call_tool("increment", {"amount": 1})
                done = await s.call_tool("done", {})
                assert done.meta["ors/finished"] is True and done.meta["ors/reward"] == 1.0
                assert not ep.ors_open  # released when the episode ended
                after = await s.call_tool("increment", {"amount": 1})
                assert after.isError and "episode has ended" in after.content[0].text
            assert ep.calls[0]["id"] == "call_abc"
            assert [c["name"] for c in ep.calls] == ["increment", "increment", "increment",
                                                     "done"]  # the call after the end: none
            assert sum(ep.rewards) == 1.0
            assert backend.open_sessions == frozenset()
        assert server.endpoints == {}

    run(main)


def test_a_terminal_tool_with_an_argument_is_listed_with_its_schema() -> None:
    async def main() -> None:
        server = McpServer()
        async with server.serve():
            ep = await server.open(AsyncOrsEnv(env_class=BUNDLED["QA"]),
                                   options={"split": "train", "index": 0})
            async with client(ep.url) as s:
                listed = {t.name: t for t in (await s.list_tools()).tools}
            schema = listed["answer"].inputSchema
            assert schema["required"] == ["answer"]
            assert schema["properties"]["answer"]["type"] == "string"

    run(main)


def test_images_and_a_served_environment(server_url: str) -> None:
    async def main() -> None:
        server = McpServer()
        async with server.serve():
            ep = await server.open(AsyncOrsEnv(base_url=server_url, env_name="gridworld"),
                                   options={"split": "train", "index": 0})
            async with client(ep.url) as s:
                got = await s.call_tool("move", {"direction": "up"})
            kinds = [c.type for c in got.content]
            assert kinds == ["text", "image"]
            image = got.content[1]
            assert isinstance(image, types.ImageContent) and image.mimeType == "image/png"
            import base64

            assert base64.b64decode(image.data)[:8] == b"\x89PNG\r\n\x1a\n"

    run(main)


def test_idle_endpoints_are_closed_on_the_clock() -> None:
    async def main() -> None:
        clock = Clock()
        server = McpServer(idle_timeout=60, clock=clock, release_on_disconnect=False)
        async with server.serve():
            backend = AsyncLocalBackend(COUNTER)
            env_a, env_b = AsyncOrsEnv(backend=backend), AsyncOrsEnv(backend=backend)
            a = await server.open(env_a, options={"task_spec": {"target": 3}})
            b = await server.open(env_b, options={"task_spec": {"target": 3}})
            clock.now += 59
            async with client(b.url) as s:
                await s.call_tool("increment", {"amount": 1})  # b is active now
            assert await server.reap_idle() == []
            clock.now += 1
            assert await server.reap_idle() == [a.id]
            assert a.closed_reason == "idle" and len(backend.open_sessions) == 1
            assert set(server.endpoints) == {b.id} and b.ors_open
            async with httpx.AsyncClient() as http:
                gone = await http.post(a.url, json={})
            assert gone.status_code == 404
            clock.now += 60
            assert await server.reap_idle() == [b.id]

    run(main)


def test_a_disconnect_releases_the_session_unless_told_not_to() -> None:
    async def main(release: bool) -> None:
        server = McpServer(release_on_disconnect=release)
        async with server.serve():
            backend = AsyncLocalBackend(COUNTER)
            ep = await server.open(AsyncOrsEnv(backend=backend),
                                   options={"task_spec": {"target": 3}})
            async with client(ep.url) as s:
                await s.list_tools()
            assert (ep.closed_reason == "disconnected") is release
            assert (server.endpoints == {}) is release
            assert (backend.open_sessions == frozenset()) is release

    asyncio.run(main(True))
    asyncio.run(main(False))


def test_many_endpoints_at_once_are_kept_apart() -> None:
    async def main() -> None:
        server = McpServer()
        async with server.serve():
            targets = list(range(1, 9))
            eps = await asyncio.gather(*(
                server.open(AsyncOrsEnv(env_class=COUNTER), options={"task_spec": {"target": t}})
                for t in targets))
            assert len({e.url for e in eps}) == len(eps)

            async def play(url: str, amount: int) -> str:
                async with client(url) as s:
                    got = await s.call_tool("increment", {"amount": min(amount, 5)})
                    return got.content[0].text  # type: ignore[union-attr,no-any-return]

            plays = (play(e.url, t) for e, t in zip(eps, targets, strict=True))
            texts = await asyncio.gather(*plays)
            assert texts == [f"The counter is now {min(t, 5)}." for t in targets]

    run(main)


def test_the_tool_list_changes_with_the_session() -> None:
    async def main() -> None:
        changed = asyncio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(getattr(message, "root", None), types.ToolListChangedNotification):
                changed.set()

        server = McpServer(watch_tools=True)
        async with server.serve():
            ep = await server.open(AsyncOrsEnv(env_class="tests.mcp._envs:Unlock"),
                                   options={"split": "train", "index": 0})
            async with client(ep.url, on_message) as s:
                assert [t.name for t in (await s.list_tools()).tools] == ["unlock"]
                await s.call_tool("unlock", {})
                await asyncio.wait_for(changed.wait(), 30)
                assert [t.name for t in (await s.list_tools()).tools] == ["unlock", "secret"]
                won = await s.call_tool("secret", {})
                assert won.meta["ors/reward"] == 1.0 and won.meta["ors/finished"]

    run(main)


def test_a_call_that_ran_keeps_its_result_when_its_tools_cannot_be_read_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """An error result would tell the harness a call that ran had failed (and so to make it
    again): the result is sent, the failure to read the tools logged at WARNING."""
    async def main() -> None:
        server = McpServer(watch_tools=True)
        async with server.serve():
            ep = await server.open(AsyncOrsEnv(env_class="tests.mcp._envs:Fragile"),
                                   options={"split": "train", "index": 0})
            async with client(ep.url) as s:
                got = await s.call_tool("spoil", {})
            assert not got.isError and got.content[0].text == "Spoiled."
            assert [c["name"] for c in ep.calls] == ["spoil"]

    with caplog.at_level("WARNING", logger="ors_gym"):
        run(main)
    assert any("reading an MCP endpoint's tools again after spoil failed" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_the_stdio_relay_passes_calls_and_ids_through() -> None:
    async def main() -> None:
        server = McpServer()
        async with server.serve():
            ep = await server.open(AsyncOrsEnv(env_class=COUNTER),
                                   options={"task_spec": {"target": 2}})
            params = StdioServerParameters(command=sys.executable,
                                           args=["-m", "ors_gym.mcp", ep.url])
            async with stdio_client(params) as (read, write), \
                    ClientSession(read, write) as s:
                await s.initialize()
                assert {t.name for t in (await s.list_tools()).tools} == {
                    "increment", "decrement", "done"}
                got = await s.call_tool("increment", {"amount": 2}, meta={"ors/call_id": "c7"})
                assert got.meta["ors/call_id"] == "c7"
            assert ep.calls[0]["id"] == "c7"

    run(main)


def test_bad_settings_and_unknown_urls_are_refused() -> None:
    with pytest.raises(ValueError, match="idle_timeout"):
        McpServer(idle_timeout=0)

    async def main() -> None:
        server = McpServer()
        with pytest.raises(RuntimeError, match="not serving"):
            await server.open(AsyncOrsEnv(env_class=COUNTER))
        async with server.serve() as url:
            async with httpx.AsyncClient() as http:
                assert (await http.post(f"{url}/mcp/nope", json={})).status_code == 404

    run(main)


def test_a_client_ending_its_session_logs_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        server = McpServer()
        async with server.serve():
            ep = await server.open(AsyncOrsEnv(env_class=COUNTER),
                                   options={"task_spec": {"target": 3}})
            async with client(ep.url) as s:
                await s.list_tools()

    with caplog.at_level("DEBUG", logger="mcp"):
        run(main)
    assert not [r for r in caplog.records if r.levelno >= 40], [
        r.getMessage() for r in caplog.records if r.levelno >= 40]


def test_a_failing_ors_call_is_an_error_result_and_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """The ORS session gone under the endpoint: the harness gets MCP's error result, and the
    failure is logged at WARNING (the harness's model alone would otherwise see it)."""
    async def main() -> None:
        server = McpServer()
        async with server.serve():
            backend = AsyncLocalBackend(COUNTER)
            ep = await server.open(AsyncOrsEnv(backend=backend),
                                   options={"task_spec": {"target": 3}})
            await backend.delete_session(ep.env.session_id)
            async with client(ep.url) as s:
                got = await s.call_tool("increment", {"amount": 1})
            assert got.isError and ep.calls == []

    with caplog.at_level("WARNING", logger="ors_gym"):
        run(main)
    assert any("ORS call increment failed" in r.getMessage() for r in caplog.records
               if r.levelname == "WARNING"), [r.getMessage() for r in caplog.records]
