"""``vf-eval ors-gym-verifiers``: verifiers' own CLI, run from the verifiers venv, over HTTP.

verifiers cannot share a venv with the ``openreward`` SDK, so ``vf-eval`` runs from
the venv ``scripts/verifiers-venv.sh`` builds (``.verifiers-venv``, or
``$ORS_GYM_VERIFIERS_VENV``), as a subprocess, against a real ORS server in this
process (the suite's venv has the SDK) and the suite's OpenAI-compatible server,
which streams. Three runs start together and the tests read what they left: QA (a
``@terminal`` env, answers written by the test), GridWorld (``move`` ends the
episode; images in the prompt and in tool results; verifiers' built-in ``null``
harness named explicitly) and a URL where nothing listens.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ors_gym.env import OrsEnv
from tests._openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("ORS_GYM_VERIFIERS_VENV") or ROOT / ".verifiers-venv")
VF_EVAL = VENV / "bin" / "vf-eval"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VF_EVAL.exists(),
        reason=f"no verifiers venv at {VENV}: build it with scripts/verifiers-venv.sh "
               "(verifiers cannot share the suite's venv with the openreward SDK)",
    ),
]

#: QA's first three training questions: answered right, answered wrong, and one whose every
#: model call fails (the rollout fails: verifiers skips its finalize).
_QA_ANSWERS = {"France": "Paris", "Japan": "Kyoto", "Italy": ""}
_QA_EXPECTED = {"France": 1.0, "Japan": 0.0}
_DEAD_URL = "http://127.0.0.1:9"
_KEY = "sk-ors-test-4f1d9a7c2b"


@dataclass
class _Model:
    """What one OpenAI-compatible server was asked."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, messages: list[Any], tools: list[Any]) -> None:
        with self.lock:
            self.requests.append({"messages": messages, "tools": tools})


def _qa_reply(model: _Model) -> Any:
    """Ask for a hint first, then answer the question in plain text."""

    def respond(messages: list[Any], tools: list[Any]) -> dict[str, Any]:
        model.seen(messages, tools)
        if "Italy" in str(messages[0]["content"]):
            raise RuntimeError("the model provider is down")
        if not any(m.get("role") == "tool" for m in messages):
            return {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_hint_{len(model.requests)}", "type": "function",
                "function": {"name": "hint", "arguments": "{}"}}]}
        question = str(messages[0]["content"])
        country = next(name for name in _QA_ANSWERS if name in question)
        return {"role": "assistant", "content": _QA_ANSWERS[country]}

    return respond


def _scripted(model: _Model) -> Any:
    from ors_gym.eval.models import conversation_seed
    from ors_gym.scripted import ScriptedLLM

    def respond(messages: list[Any], tools: list[Any]) -> dict[str, Any]:
        model.seen(messages, tools)
        return ScriptedLLM("openai", seed=conversation_seed(messages, 0)).act(messages, tools)

    return respond


@dataclass
class _Run:
    returncode: int
    output: str
    episodes: list[dict[str, Any]]


def _vf_eval(*args: str, out: Path, extra_env: dict[str, str] | None = None
             ) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update(extra_env or {})
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # uv, for the chat program
    env["PYTHONPATH"] = str(ROOT)  # this checkout's ors_gym, whichever the venv was built from
    with (out / "vf-eval.out").open("wb") as sink:  # a file, not a pipe: nothing waits on a reader
        return subprocess.Popen(
            [str(VF_EVAL), "ors-gym-verifiers", *args, "--no-push", "-o", str(out)],
            cwd=out, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
        )


def _finish(proc: subprocess.Popen[bytes], out: Path) -> _Run:
    try:
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = (out / "vf-eval.out").read_text(errors="replace")
    episodes = [json.loads(line) for path in out.rglob("traces.jsonl")
                for line in path.read_text().splitlines() if line.strip()]
    return _Run(proc.returncode, output, episodes)


@dataclass
class _Runs:
    qa: _Run
    grid: _Run
    dead: _Run
    qa_dir: Path
    qa_model: _Model
    grid_model: _Model
    sessions_before: set[Any]
    sessions_after: set[Any]


@pytest.fixture(scope="module")
def runs(server: Any, server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Runs]:
    qa_model, grid_model = _Model(), _Model()
    before = set(server.sdk_server._active_envs)
    with OpenAIServer(respond=_qa_reply(qa_model)) as qa_llm, \
            OpenAIServer(respond=_scripted(grid_model)) as grid_llm:
        dirs = [tmp_path_factory.mktemp(name) for name in ("qa", "grid", "dead")]
        procs = [
            # The hosted path (a deployment, its key read from OPENREWARD_API_KEY), pointed at
            # the local server, whose SDK ignores the gateway's headers; the taskset's own
            # Env and Harness: no flag beyond where things are.
            _vf_eval("--env.taskset.deployment", "ors/demo", "--env.taskset.variant", "qa",
                     "-n", "3", "-m", "test-model", "--client.base-url", qa_llm.base_url,
                     out=dirs[0], extra_env={"OPENREWARD_API_KEY": _KEY,
                                             "OPENREWARD_SESSION_URL": server_url}),
            # verifiers' built-in null harness on the subprocess runtime, named explicitly.
            _vf_eval("--env.taskset.base-url", server_url, "--env.taskset.env-name", "gridworld",
                     "-n", "1", "-m", "test-model", "--client.base-url", grid_llm.base_url,
                     "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
                     out=dirs[1]),
            _vf_eval("--env.taskset.base-url", _DEAD_URL, "-m", "test-model",
                     "--client.base-url", qa_llm.base_url, out=dirs[2]),
        ]
        qa, grid, dead = (_finish(proc, out) for proc, out in zip(procs, dirs, strict=True))
    yield _Runs(qa, grid, dead, dirs[0], qa_model, grid_model, before,
                set(server.sdk_server._active_envs))


def _traces(run: _Run) -> list[dict[str, Any]]:
    assert run.returncode == 0, run.output[-3000:]
    return [trace for episode in run.episodes for trace in episode["traces"]]


def _assistant_turns(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [n["message"] for n in trace["nodes"]
            if n.get("sampled") and n["message"]["role"] == "assistant"]


def _replay(server_url: str, trace: dict[str, Any]) -> tuple[float, bool]:
    """The environment's own grading of the trace's turns: the same task, the same actions."""
    data = trace["task"]["data"]
    env = OrsEnv(base_url=server_url, env_name=data["env_name"])
    try:
        env.reset(options={"split": data["split"], "index": data["index"]})
        total, done = 0.0, False
        for turn in _assistant_turns(trace):
            calls = turn.get("tool_calls") or []
            action: Any = {"tool_calls": [
                {"name": c["name"], "arguments": json.loads(c["arguments"] or "{}")}
                for c in calls]} if calls else (turn.get("content") or "")
            _, reward, terminated, _, _ = env.step(action)
            total += float(reward)
            done = bool(terminated)
            if done:
                break
        return total, done
    finally:
        env.close()


def _reward(trace: dict[str, Any]) -> float:
    return float(trace["rewards"]["ors_return"]["score"])


def _country(trace: dict[str, Any]) -> str:
    question = trace["task"]["data"]["prompt"][0]["content"]
    return next(name for name in _QA_ANSWERS if name in question)


def test_qa_rewards_are_the_terminal_tools_grades(runs: _Runs, server_url: str) -> None:
    traces = [t for t in _traces(runs.qa) if _country(t) != "Italy"]
    assert len(traces) == 2
    by_country = {}
    for trace in traces:
        by_country[_country(trace)] = _reward(trace)
        graded, finished = _replay(server_url, trace)
        assert finished and _reward(trace) == graded
        # The hint, then the final plain reply handed to the terminal tool.
        assert trace["metrics"]["ors_tool_calls"] == 2.0
        assert [bool(t.get("tool_calls")) for t in _assistant_turns(trace)] == [True, False]
    assert by_country == _QA_EXPECTED


def test_a_failed_rollout_is_recorded_as_failed(runs: _Runs) -> None:
    (failed,) = [t for t in _traces(runs.qa) if _country(t) == "Italy"]
    assert not failed["ok"] and failed["errors"]
    assert not _assistant_turns(failed)
    # Its session is deleted all the same: see test_no_session_is_left_on_the_server.


def test_qa_model_calls_prompt_and_tools(runs: _Runs) -> None:
    requests = [r for r in runs.qa_model.requests if "Italy" not in str(r["messages"][0])]
    assert len(requests) == 4  # a hint and an answer per rollout, nothing after the grade
    for request in requests:
        names = [t["function"]["name"] for t in request["tools"]]
        assert names == ["hint"]  # under its own name; the @terminal `answer` is hidden
        opening = request["messages"][0]
        assert opening["role"] == "user" and "Reply with just the answer" in str(opening["content"])


def test_the_hosted_key_is_read_by_name_and_never_written(runs: _Runs) -> None:
    assert _traces(runs.qa)
    written = [p for p in runs.qa_dir.rglob("*") if p.is_file()]
    assert any(p.name == "traces.jsonl" for p in written)
    assert not [p for p in written if _KEY in p.read_text(errors="replace")]
    config = json.loads(next(p for p in written if p.name == "eval.json").read_text())
    assert config["env"]["taskset"]["api_key_var"] == "OPENREWARD_API_KEY"


def test_gridworld_ends_at_finished_with_the_env_return(runs: _Runs, server_url: str) -> None:
    traces = _traces(runs.grid)
    assert len(traces) == 1
    turns = 0
    for trace in traces:
        assert trace["stop_condition"] == "finished", trace["errors"]
        graded, finished = _replay(server_url, trace)
        assert finished and _reward(trace) == pytest.approx(graded)
        assistant = _assistant_turns(trace)
        assert assistant[-1]["tool_calls"][-1]["name"] == "move"
        turns += len(assistant)
    # Every model call is a turn of some trace: none was made after `finished`.
    assert len(runs.grid_model.requests) == turns


def test_gridworld_images_reach_the_model_as_image_parts(runs: _Runs) -> None:
    def image_parts(message: dict[str, Any]) -> int:
        content = message.get("content")
        parts = content if isinstance(content, list) else []
        return sum(1 for part in parts if part.get("type") == "image_url"
                   and part["image_url"]["url"].startswith("data:image/png;base64,"))

    first = runs.grid_model.requests[0]["messages"]
    assert image_parts(next(m for m in first if m["role"] == "user")) == 1
    tool_results = [m for r in runs.grid_model.requests for m in r["messages"]
                    if m["role"] == "tool"]
    assert tool_results and all(image_parts(m) == 1 for m in tool_results)


def test_no_session_is_left_on_the_server(runs: _Runs) -> None:
    assert runs.qa.returncode == 0 and runs.grid.returncode == 0
    assert runs.sessions_after == runs.sessions_before


def test_a_dead_url_fails_before_any_rollout(runs: _Runs) -> None:
    assert runs.dead.returncode != 0
    assert re.search(rf"{re.escape(_DEAD_URL)}\b", runs.dead.output)
    assert "--env.taskset.base-url" in runs.dead.output
    assert not any(episode["traces"] for episode in runs.dead.episodes)
