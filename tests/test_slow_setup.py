"""Slow prompts and setups: the backends wait as the SDK client waits.

One environment's prompt takes longer than the HTTP backend's request ``timeout``;
another's ``setup()`` fails after the server's "starting" window has passed (so the
client first gets a retryable "still starting" 503, then the error). Both run at once,
over HTTP and in-process. The request timeout, the keep-alive interval and the SDK
server's "starting" window are scaled down from their defaults (30 s, 30 s, 25 s) so the
test waits seconds, not most of a minute; the relations between them are the ones a
default setup has. The HTTP server is wrapped in ``FaultyApp`` only to count the pings
that keep the sessions alive meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402 - after the SDK's environment is set
    Environment,
    JSONObject,
    Server,
    Split,
    TextBlock,
    ToolOutput,
    tool,
)
from openreward.environments import server as sdk_server  # noqa: E402

from ors_gym.backends.http import AsyncHttpBackend  # noqa: E402
from ors_gym.backends.local import AsyncLocalBackend  # noqa: E402
from ors_gym.errors import OrsServerError, OrsTimeoutError  # noqa: E402
from tests._fault_servers import FaultyApp, UvicornThread  # noqa: E402

REQUEST_TIMEOUT_S = 3.0  # the backend's ``timeout`` (default 30 s): the prompt outlasts it
STARTING_WINDOW_S = 1.0  # the SDK server's wait before a "still starting" 503 (default 25 s)
KEEPALIVE_S = 0.5  # the backend's ping interval (default 30 s)
PROMPT_S = 2 * REQUEST_TIMEOUT_S
SETUP_FAILS_S = 4 * STARTING_WINDOW_S
FAILURE = "the sandbox image could not be pulled: registry quota exceeded"


class _Base(Environment):
    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": 0}]

    @tool
    async def noop(self) -> ToolOutput:
        """Do nothing."""
        return ToolOutput(blocks=[TextBlock(text="ok")])


class SlowPrompt(_Base):
    """Its prompt takes PROMPT_S seconds to write."""

    async def get_prompt(self) -> list[TextBlock]:
        await asyncio.sleep(PROMPT_S)
        return [TextBlock(text="worth the wait")]


class FailingSetup(_Base):
    """Its setup() fails after SETUP_FAILS_S seconds."""

    async def setup(self) -> None:
        await asyncio.sleep(SETUP_FAILS_S)
        raise RuntimeError(FAILURE)

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="never shown")]


class FewSeconds(_Base):
    """Its prompt takes 3 s: past a 1 s setup_timeout, and soon over for the server."""

    async def get_prompt(self) -> list[TextBlock]:
        await asyncio.sleep(3.0)
        return [TextBlock(text="late")]


async def _prompt(backend: Any, name: str) -> Any:
    sid = await backend.create_session(name, split="train", index=0)
    try:
        return await backend.prompt(name, sid)
    except Exception as exc:  # the test inspects it
        return exc
    finally:
        await backend.delete_session(sid)


@pytest.mark.slow
def test_slow_prompt_and_failing_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_server, "_SETUP_WAIT_TIMEOUT_S", STARTING_WINDOW_S)
    app = FaultyApp(Server([SlowPrompt, FailingSetup]).app)
    with UvicornThread(app) as srv:

        async def run() -> list[Any]:
            http = AsyncHttpBackend(srv.url, timeout=REQUEST_TIMEOUT_S,
                                    keepalive_interval=KEEPALIVE_S)
            local = AsyncLocalBackend([SlowPrompt, FailingSetup])
            try:
                return list(await asyncio.gather(
                    _prompt(http, "slowprompt"), _prompt(http, "failingsetup"),
                    _prompt(local, "slowprompt"), _prompt(local, "failingsetup"),
                ))
            finally:
                await http.aclose()
                await local.aclose()

        results = asyncio.run(run())
    for slow in (results[0], results[2]):
        assert not isinstance(slow, Exception), slow
        assert slow[0].text == "worth the wait"
    for failed in (results[1], results[3]):
        assert isinstance(failed, OrsServerError), failed
        assert FAILURE in str(failed) and failed.status_code == 500
    assert app.hits["/ping"] >= 3  # both sessions kept alive while they waited
    assert app.hits["/failingsetup/prompt"] >= 2  # a "starting" 503 ridden out, then the error


def test_setup_timeout_bounds_the_wait() -> None:
    """``setup_timeout`` is the bound (here 1 s on a 3 s prompt), named in the error."""
    with UvicornThread(Server([FewSeconds]).app) as srv:

        async def run() -> None:
            async with AsyncHttpBackend(srv.url, setup_timeout=1.0) as http:
                sid = await http.create_session("fewseconds", split="train", index=0)
                with pytest.raises(OrsTimeoutError, match=r"setup_timeout=1\.0"):
                    await http.prompt("fewseconds", sid)

        asyncio.run(run())
