"""One ORS task as a verifiers task: a session per rollout, graded by the environment.

``setup`` opens the rollout's session and makes the ORS prompt the opening messages;
the tool server forwards the model's calls; ``finalize`` hands a final plain reply to
the ``@terminal`` tool (when the episode has not finished already) and deletes the
session. The reward is the ORS episode return, and ``@stop`` ends the rollout once
the environment says ``finished``, before another model call.
"""

from __future__ import annotations

import hashlib
import json

from verifiers.v1.runtimes import Runtime
from verifiers.v1.task import Task, TaskData
from verifiers.v1.trace import Trace
from verifiers.v1.types import AssistantMessage
from verifiers.v1.utils.decorators import metric, reward, stop

from ors_gym.errors import OrsError
from ors_gym.verifiers.config import DEFAULT_API_KEY_VAR, OrsTaskConfig, OrsTasksetConfig
from ors_gym.verifiers.messages import messages_as_chat
from ors_gym.verifiers.sessions import (
    close_session,
    connection_of,
    open_session,
    shared_backend,
)
from ors_gym.verifiers.state import OrsState

__all__ = ["OrsTask", "OrsTaskData"]


class OrsTaskData(TaskData):
    """Which ORS task: where it lives, its environment, split and index (no secrets)."""

    base_url: str | None = None
    deployment: str | None = None
    variant: str | None = None
    api_key_var: str = DEFAULT_API_KEY_VAR
    request_timeout: float = 60.0
    """Seconds one ORS request may take (the taskset's ``timeout``)."""
    env_name: str
    split: str
    index: int


class OrsTask(Task[OrsTaskData, OrsState, OrsTaskConfig]):
    """One ORS task; each rollout of it is one ORS session."""

    @property
    def key(self) -> str:
        data = self.data
        where = data.base_url or f"{data.deployment}:{data.variant}"
        ident = json.dumps([where, data.env_name, data.split, data.index])
        return hashlib.sha256(ident.encode()).hexdigest()

    async def setup(self, trace: Trace, runtime: Runtime) -> None:
        data = self.data
        conn = connection_of(OrsTasksetConfig(
            base_url=data.base_url, deployment=data.deployment, variant=data.variant,
            api_key_var=data.api_key_var, timeout=data.request_timeout,
        ))
        state: OrsState = trace.state
        messages = await open_session(state, conn, data.env_name, data.split, data.index)
        # The prompt exists only once the session does: the rollout's copy of the task
        # data (what the harness reads and the trace records) gets it now.
        trace.task.data = trace.task.data.model_copy(update={"prompt": messages_as_chat(messages)})

    async def finalize(self, trace: Trace, runtime: Runtime) -> None:
        state: OrsState = trace.state
        try:
            if state.session_id is None or state.finished or state.terminal_tool is None:
                return
            reply = _final_plain_reply(trace)
            if reply is None:
                return
            backend = shared_backend(state.connection)
            result = await backend.call(state.env_name, state.session_id,
                                        state.terminal_tool["name"], state.terminal_input(reply))
            state.record(result)
        except OrsError as exc:
            raise exc.with_context(server=state.connection.location, env_name=state.env_name,
                                   session_id=state.session_id) from None
        finally:
            await close_session(state.connection, state.session_id)
            state.session_id = None

    @stop
    async def finished(self, trace: Trace) -> bool:
        """The environment ended the episode: the model is not called again."""
        return bool(trace.state.finished)

    @reward
    async def ors_return(self, trace: Trace) -> float:
        """The ORS episode return: the sum of the rewards the environment gave."""
        return float(trace.state.episode_return)

    @metric
    async def ors_tool_calls(self, trace: Trace) -> float:
        """ORS tool calls made, the terminal one included."""
        return float(trace.state.calls)


def _final_plain_reply(trace: Trace) -> str | None:
    """The last model message's text when it calls no tool, else None."""
    replies = trace.assistant_messages
    if not replies:
        return None
    last: AssistantMessage = replies[-1]
    if last.tool_calls:
        return None
    return last.content or ""
