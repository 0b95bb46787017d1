"""Small SDK environments for HTTP-backend tests, covering what the bundled ones do not.

``Probe`` reports a digest of a secret it received (never the secret itself,
since server-side logs would show it), blocks a tool on a gate the test
releases (call timeouts), and implements ``score_group``.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Sequence

from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402 - after the SDK's environment is set
    Environment,
    GroupCandidate,
    GroupScore,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
    tool,
)
from openreward.environments.types import Message as SDKMessage  # noqa: E402
from pydantic import BaseModel  # noqa: E402

__all__ = ["GATE", "Census", "Dialogue", "Probe", "digest"]

#: Held closed by tests; ``Probe.wait_gate`` returns once it is set (or after 10 s).
GATE = threading.Event()


def digest(value: str) -> str:
    """What ``Probe.secret_digest`` reports for a secret value."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class SecretName(BaseModel):
    name: str


class Probe(Environment):
    """Secrets, a gated slow tool and group scoring, for transport tests."""

    def __init__(
        self, task_spec: JSONObject | None = None, secrets: dict[str, str] | None = None
    ) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self.secrets = dict(secrets or {})

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": i} for i in range(3)]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"probe task {self.task_spec.get('id')}")]

    @tool
    async def secret_digest(self, params: SecretName) -> ToolOutput:
        """SHA-256 of the named secret, or 'missing'."""
        value = self.secrets.get(params.name)
        return ToolOutput(blocks=[TextBlock(text=digest(value) if value else "missing")])

    @tool
    async def wait_gate(self) -> ToolOutput:
        """Return once the test opens GATE."""
        await asyncio.to_thread(GATE.wait, 10.0)
        return ToolOutput(blocks=[TextBlock(text="released")], reward=0.0)

    async def score_group(self, candidates: Sequence[GroupCandidate]) -> Sequence[GroupScore]:
        return [
            GroupScore(reward=float(i), metadata={"turns": len(c.messages)})
            for i, c in enumerate(candidates)
        ]


class AnswerParams(BaseModel):
    text: str


class Dialogue(Environment):
    """A conversation-shaped prompt (``get_messages``): the policy continues a dialogue."""

    def __init__(
        self, task_spec: JSONObject | None = None, secrets: dict[str, str] | None = None
    ) -> None:
        super().__init__(task_spec or {}, secrets or {})

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": 0}]

    async def get_messages(self) -> list[SDKMessage]:
        return [
            SDKMessage(role="system", blocks=[TextBlock(text="You translate.")]),
            SDKMessage(role="user", blocks=[TextBlock(text="Say hello in German.")]),
            SDKMessage(role="assistant", blocks=[TextBlock(text="Hallo.")]),
            SDKMessage(role="user", blocks=[TextBlock(text="And now in French?")]),
        ]

    @tool
    async def answer(self, params: AnswerParams) -> ToolOutput:
        """Give the translation."""
        ok = params.text.strip().lower().startswith("bonjour")
        return ToolOutput(blocks=[TextBlock(text="ok" if ok else "no")], reward=float(ok),
                          finished=True)


class Census(Environment):
    """Latency's ``wait`` tool, plus a count of the sessions alive in this server process.

    Each instance the server makes for a session counts until its ``teardown``
    (the server tears a session down when it is deleted), so
    ``list_tasks("census")`` (no session needed) answers ``[{"live": n,
    "waiting": w}]``: the sessions a client has left open on this server, and
    the ``wait`` calls running now, read from the server. A deleted session's
    running ``wait`` returns at once.
    """

    live = 0
    waiting = 0
    _lock = threading.Lock()

    def __init__(
        self, task_spec: JSONObject | None = None, secrets: dict[str, str] | None = None
    ) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self.delay_s = float((task_spec or {}).get("delay_ms", 20)) / 1000
        self.length = int((task_spec or {}).get("length", 1_000_000))
        self.steps = 0
        self._ended = asyncio.Event()  # set by teardown: a running wait returns at once
        self._counted = True
        with Census._lock:
            Census.live += 1

    async def teardown(self) -> None:
        self._ended.set()
        with Census._lock:
            if self._counted:
                self._counted = False
                Census.live -= 1

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train", "census"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        if split == "census":
            return [{"live": cls.live, "waiting": cls.waiting}]
        return [{"delay_ms": 20}]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Call wait.")]

    @tool
    async def wait(self) -> ToolOutput:
        """Sleep for the task's delay_ms, then answer 'waited k' (k: calls so far)."""
        Census.waiting += 1
        try:
            await asyncio.wait_for(self._ended.wait(), self.delay_s)
        except TimeoutError:
            pass
        finally:
            Census.waiting -= 1
        self.steps += 1
        return ToolOutput(blocks=[TextBlock(text=f"waited {self.steps}")], reward=0.0,
                          finished=self.steps >= self.length)
