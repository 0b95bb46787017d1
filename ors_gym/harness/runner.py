"""Play a harness on ORS episodes: its tools over MCP, its model through the gateway.

:class:`HarnessRunner` holds a served :class:`~ors_gym.gateway.Gateway` and an
:class:`~ors_gym.mcp.McpServer` on the running event loop. :meth:`HarnessRunner.run`
plays one episode: the ORS session is opened and served as an MCP endpoint, a
capture session is opened, and the harness is started with the task's prompt, the
model endpoint and key, and the MCP server in the form it reads (see
:mod:`ors_gym.harness.spec`). It ends when the harness exits, when its deadline
passes, or a grace period after the episode finished; its whole process group is
stopped and its output kept. A harness that exits cleanly with the episode
unfinished has its last plain answer (as the gateway recorded it) sent to the
terminal tool, as ORS's terminal-tool rule says. The capture session is closed with
the episode's ORS rewards, and a :class:`HarnessEpisode` holds the
:class:`~ors_gym.tokens.Trajectory`, the stop reason (:data:`STOPS`), the exit
status, the ORS calls (with the harness's ids), and the output. Nothing stays open
whatever happens: the endpoint, the ORS session, the capture session, the process
group and the working directory are released in every case.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ors_gym.gateway import Gateway
from ors_gym.harness._process import Ended, run_process, wait_until_cut
from ors_gym.harness.remote import GatewayClient
from ors_gym.harness.spec import Harness, HarnessContext, Launch
from ors_gym.mcp import McpEndpoint, McpServer
from ors_gym.tokens import Trajectory, stops

__all__ = ["STOPS", "HarnessEpisode", "HarnessRunner"]

logger = logging.getLogger("ors_gym")

#: A harness episode's stop reasons: the episode finished (a call ended it); the
#: harness exited with it unfinished; its deadline passed; it failed (a non-zero exit,
#: an exception, or it could not start); the model's context was full.
STOPS: tuple[str, ...] = ("finished", "harness_exited", "deadline", "harness_failed",
                          "context_full")

#: Each stop reason as the trajectory's (``ors_gym.tokens.stops``); "finished" is
#: "completed" when the terminal tool ended it, "env_ended" for another tool.
_TRAJECTORY_STOP = {"harness_exited": stops.COMPLETED, "deadline": stops.TIMEOUT,
                    "harness_failed": stops.ENV_ERROR,
                    "context_full": stops.CONTEXT_OVERFLOW}


@dataclass
class HarnessEpisode:
    """One harness episode: ``trajectory`` (its ids, mask, logprobs and ORS return),
    ``stop`` (one of :data:`STOPS`), ``exit_status`` (the process's; negative: the
    signal that stopped it; None: it never started or was a callable that was
    cancelled), ``calls`` (the ORS calls, each with the harness's id for it),
    ``final_answer`` (the plain answer sent to the terminal tool, if any), the
    harness's ``stdout`` and ``stderr`` (their ends), ``error`` (why it failed)."""

    harness: str
    trajectory: Trajectory
    stop: str
    exit_status: int | None
    calls: list[dict[str, Any]] = field(default_factory=list)
    final_answer: str | None = None
    task_spec: dict[str, Any] = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    seconds: float = 0.0

    @property
    def reward(self) -> float:
        """The episode's ORS return."""
        return self.trajectory.reward

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the trajectory as ``Trajectory.to_dict``)."""
        return {"harness": self.harness, "stop": self.stop, "exit_status": self.exit_status,
                "reward": self.reward, "calls": self.calls, "final_answer": self.final_answer,
                "task_spec": self.task_spec, "seconds": self.seconds, "error": self.error,
                "stdout": self.stdout, "stderr": self.stderr,
                "trajectory": self.trajectory.to_dict()}


class HarnessRunner:
    """Runs harnesses on ORS episodes (see the module); an async context manager.

    ``gateway``: a served :class:`~ors_gym.gateway.Gateway` (``GatewayThread``), the
    harness's model endpoint, or a :class:`~ors_gym.harness.GatewayClient` for one served
    by another process. ``model``: the model name handed to harnesses (default:
    the gateway's). ``finish_grace``: seconds a harness has to exit on its own after
    its episode finished. ``kill_grace``: seconds between SIGTERM and SIGKILL.
    ``max_output``: the characters of stdout and stderr kept (their ends).
    ``idle_timeout``: an MCP endpoint's (see :class:`~ors_gym.mcp.McpServer`).
    ``workdir_root``: where each episode's working directory is made (default: the
    system's temporary folder); ``keep_workdirs`` keeps them. ``watch_tools``: read the
    session's tools again after each call and tell the harness when they changed (for
    environments whose tools change mid-episode).
    """

    def __init__(self, gateway: Gateway | GatewayClient, *, model: str | None = None,
                 finish_grace: float = 30.0, kill_grace: float = 5.0,
                 max_output: int = 100_000, idle_timeout: float | None = 3600.0,
                 workdir_root: str | os.PathLike[str] | None = None,
                 keep_workdirs: bool = False, host: str = "127.0.0.1",
                 watch_tools: bool = False) -> None:
        if gateway.url is None:
            raise ValueError("the gateway is not served: start it (GatewayThread(gateway)"
                             ".start() or ors_gym.gateway.serve) before the runner, so "
                             "harnesses have a base URL to call")
        self.gateway = gateway
        self.model = model or gateway.model
        self.finish_grace = finish_grace
        self.kill_grace = kill_grace
        self.max_output = max_output
        self.workdir_root = workdir_root
        self.keep_workdirs = keep_workdirs
        self.mcp = McpServer(idle_timeout=idle_timeout, release_on_disconnect=False,
                             watch_tools=watch_tools)
        self._host = host
        self._serving: Any = None

    async def __aenter__(self) -> HarnessRunner:
        self._serving = self.mcp.serve(self._host)
        await self._serving.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        serving, self._serving = self._serving, None
        if serving is not None:
            await serving.__aexit__(*exc_info)

    async def run(self, harness: Harness, env: Any, *, options: dict[str, Any] | None = None,
                  seed: int | None = None, deadline: float = 600.0) -> HarnessEpisode:
        """Play ``harness`` on one episode of ``env`` (an ``AsyncOrsEnv``, owned from here:
        it is closed with the episode); ``options`` and ``seed`` as its ``reset`` takes
        them; ``deadline``: seconds the harness may run."""
        if self._serving is None:
            raise RuntimeError("use the runner inside `async with HarnessRunner(gateway) as "
                               "runner:`")
        if not deadline > 0:
            raise ValueError(f"deadline must be a positive number of seconds, got {deadline!r}")
        began = time.monotonic()
        endpoint: McpEndpoint | None = None
        sid: str | None = None
        workdir: Path | None = None
        try:
            endpoint = await self.mcp.open(env, seed=seed, options=options)
            info = self.gateway.open_session()
            sid = info.id
            workdir = Path(tempfile.mkdtemp(prefix="ors-harness-", dir=self.workdir_root))
            launch = _launch(harness, endpoint, info, self.model, workdir)
            ended, out, err = await self._play(harness, launch, endpoint, workdir, deadline)
            stop = self._stop(endpoint, ended, sid)
            answer = None
            if stop == "harness_exited":
                answer = await _route_answer(endpoint, self.gateway.trajectory(sid))
            trajectory = self.gateway.close_session(sid, endpoint.rewards,
                                                    stop_reason=_trajectory_stop(stop, endpoint))
            hidden = _credentials(harness.variables(launch), launch.api_key)
            return HarnessEpisode(
                harness=harness.name, trajectory=trajectory, stop=stop,
                exit_status=ended.status, calls=list(endpoint.calls), final_answer=answer,
                task_spec=endpoint.task_spec, stdout=_redact(out, hidden)[-self.max_output:],
                stderr=_redact(err, hidden)[-self.max_output:],
                error=None if ended.error is None else _redact(ended.error, hidden),
                seconds=time.monotonic() - began)
        finally:
            await self._release(endpoint, sid, workdir, env)

    async def _play(self, harness: Harness, launch: Launch, endpoint: McpEndpoint,
                    workdir: Path, deadline: float) -> tuple[Ended, str, str]:
        _write(workdir, launch.mcp_config, harness.config_text(launch))
        for path, text in harness.file_texts(launch).items():
            _write(workdir, str(workdir / path), text)
        if harness.prompt_via == "file":
            _write(workdir, launch.prompt_file, launch.prompt)
        if harness.call is not None:
            return await self._call(harness, launch, endpoint, deadline), "", ""
        out_path, err_path = workdir / ".stdout", workdir / ".stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            ended = await run_process(
                harness.argv(launch), env={**_inherited(), **harness.variables(launch)},
                cwd=workdir, stdin_text=launch.prompt if harness.prompt_via == "stdin" else None,
                stdout=out, stderr=err, deadline=deadline, finished=endpoint.ended,
                finish_grace=self.finish_grace, kill_grace=self.kill_grace)
        return (ended, out_path.read_text(errors="replace"),
                err_path.read_text(errors="replace"))

    async def _call(self, harness: Harness, launch: Launch, endpoint: McpEndpoint,
                    deadline: float) -> Ended:
        assert harness.call is not None
        context = HarnessContext(prompt=launch.prompt, model=launch.model,
                                 mcp_url=launch.mcp_url, mcp_servers=launch.mcp_servers(),
                                 variables=harness.variables(launch), workdir=launch.workdir)
        task = asyncio.ensure_future(harness.call(context))
        cut = await wait_until_cut(task, endpoint.ended, deadline=deadline,
                                   finish_grace=self.finish_grace)
        if cut is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return Ended(None, cut)
        exc = task.exception()
        if exc is not None:
            return Ended(1, "exited", f"the harness raised {_describe(exc)}")
        return Ended(0, "exited")

    def _stop(self, endpoint: McpEndpoint, ended: Ended, sid: str) -> str:
        if endpoint.finished:
            return "finished"
        if ended.why == "deadline":
            return "deadline"
        if self.gateway.status(sid).context_overflows:  # a turn refused for a full context
            return "context_full"
        if ended.status != 0:
            return "harness_failed"
        return "harness_exited"

    async def _release(self, endpoint: McpEndpoint | None, sid: str | None,
                       workdir: Path | None, env: Any) -> None:
        """Close whatever the episode opened; each step runs whatever the others do."""
        try:
            if endpoint is not None:
                await self.mcp.close(endpoint.id, "episode_over")
            else:
                await env.close()
        except Exception as exc:
            logger.warning("releasing a harness episode's ORS session failed: %s: %s",
                           type(exc).__name__, exc)
        if sid is not None:
            try:
                if sid in self.gateway.sessions:
                    if self.gateway.trajectory(sid).stop_reason is None:
                        self.gateway.close_session(sid, stop_reason=stops.ENV_ERROR)
                    self.gateway.drop_session(sid)
            except Exception as exc:
                logger.warning("dropping a harness episode's capture session failed: %s: %s",
                               type(exc).__name__, exc)
        if workdir is not None and not self.keep_workdirs:
            shutil.rmtree(workdir, ignore_errors=True)


def _launch(harness: Harness, endpoint: McpEndpoint, info: Any, model: str,
            workdir: Path) -> Launch:
    return Launch(prompt=endpoint.prompt, mcp_url=endpoint.url, model=model,
                  openai_base_url=info.openai_base_url,
                  anthropic_base_url=info.anthropic_base_url, api_key=info.api_key,
                  workdir=str(workdir), prompt_file=str(workdir / harness.prompt_file),
                  mcp_config=str(workdir / harness.mcp_config_path),
                  server_name=harness.server_name, transport=harness.transport)


#: Variable names whose values are credentials (a word of the name: ``HF_TOKEN``,
#: ``AWS_SECRET_ACCESS_KEY``; not ``TOKENIZERS_PARALLELISM``): not inherited by a harness,
#: and kept out of its recorded output.
_CREDENTIAL_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)(?:_|$)",
                              re.IGNORECASE)
_REDACTED = "[redacted]"


def _inherited() -> dict[str, str]:
    """The runner's environment less its credentials: the model a harness runs may read
    every variable (a coding agent has a shell), so a credential a harness needs is given
    in its ``env``."""
    return {name: value for name, value in os.environ.items()
            if not _CREDENTIAL_NAME.search(name)}


def _credentials(variables: dict[str, str], api_key: str) -> list[str]:
    """The values to hide from what a harness printed: the capture session's key and
    every credential-named variable it was started with (longest first)."""
    found = {api_key, *(value for name, value in variables.items()
                        if _CREDENTIAL_NAME.search(name) and len(value) >= 8)}
    return sorted(found, key=len, reverse=True)


def _redact(text: str, credentials: list[str]) -> str:
    """``text`` with every credential replaced by ``[redacted]`` (a harness or its model
    may print its environment or an error echoing its key)."""
    for value in credentials:
        text = text.replace(value, _REDACTED)
    return text


def _write(workdir: Path, path: str, text: str) -> None:
    target = Path(path)
    if workdir.resolve() not in target.resolve().parents:
        raise ValueError(f"the harness's file {path!r} is outside its working directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def last_plain_answer(trajectory: Trajectory) -> str | None:
    """The content of the conversation's last assistant turn if it called no tool."""
    for message in reversed(trajectory.messages):
        if message.get("role") == "assistant":
            if message.get("tool_calls"):
                return None
            return str(message.get("content") or "")
    return None


async def _route_answer(endpoint: McpEndpoint, trajectory: Trajectory) -> str | None:
    """The terminal-tool rule: the harness's last plain answer goes to the terminal tool."""
    terminal = endpoint.tools.terminal_tool
    answer = last_plain_answer(trajectory)
    if terminal is None or answer is None:
        return None
    await endpoint.call(terminal.name, {} if terminal.arg is None else {terminal.arg: answer})
    if endpoint.calls:
        endpoint.calls[-1].update(id=None, routed=True)  # a plain message answers no call
    return answer


def _describe(exc: BaseException) -> str:
    """An exception as ``Type: message``; a group as its leaves' (a task group's failure
    is the error inside it)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def _trajectory_stop(stop: str, endpoint: McpEndpoint) -> str:
    if stop != "finished":
        return _TRAJECTORY_STOP[stop]
    terminal = endpoint.tools.terminal_tool
    last = endpoint.calls[-1]["name"] if endpoint.calls else None
    return stops.COMPLETED if terminal is not None and last == terminal.name else stops.ENV_ENDED
