"""The runner's own behaviour, with harnesses that need no SDK: a Python-callable harness
(the mcp client and the OpenAI SDK of this venv) played 16 times at once, kept apart; harness
commands that crash, hang past their deadline (a child of theirs too), or cannot start, each
ending with its stop reason and leaving no endpoint, ORS session, capture session or process;
a full context; and the harness's configuration in each form it reads."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ors_gym import AsyncOrsEnv
from ors_gym.backends.local import AsyncLocalBackend
from ors_gym.envs import BUNDLED
from ors_gym.harness import (
    Harness,
    HarnessRunner,
    as_trainer_batch,
    run_batch,
)
from tests.gateway.test_gateway import check_verbatim
from tests.harness._agents import chat_agent
from tests.harness._leaks import count
from tests.harness._model import counter_player

COUNTER = BUNDLED["Counter"]


def test_sixteen_episodes_at_once_are_kept_apart(
        gateway: Any, backend: Any, script: Any, tok: Any) -> None:
    script.use(counter_player(tok))
    ors = AsyncLocalBackend(COUNTER)
    targets = list(range(1, 17))
    seen: list[int] = []

    async def main() -> Any:
        async with HarnessRunner(gateway, finish_grace=30) as runner:
            episodes = await run_batch(
                runner, Harness("chat", call=chat_agent), lambda i: AsyncOrsEnv(backend=ors),
                len(targets), options=lambda i: {"task_spec": {"target": targets[i]}},
                deadline=240, progress=lambda done, n, ep: seen.append(done))
            assert count(runner, ors, gateway) == (0, 0, 0)
            return episodes

    episodes = asyncio.run(main())
    assert sorted(seen) == list(range(1, 17))
    for target, episode in zip(targets, episodes, strict=True):
        assert episode.stop == "finished" and episode.reward == 1.0, episode.error
        assert episode.task_spec == {"target": target}
        assert sum(c["input"].get("amount", 0) for c in episode.calls) == target
        traj = episode.trajectory
        assert f"Make it equal {target} " in traj.messages[0]["content"]
        mine = [r for r in backend.requests
                if r.prompt_ids[:len(traj.rows[0].prompt_ids)] == traj.rows[0].prompt_ids]
        check_verbatim(traj, mine, tok)
        called = [c["id"] for m in traj.messages if m["role"] == "assistant"
                  for c in m.get("tool_calls") or ()]
        assert [c["id"] for c in episode.calls] == called  # joined by the harness's ids
    batch = as_trainer_batch(episodes, "trl")
    assert batch["episode"] == list(range(16)) and batch["reward"] == [1.0] * 16
    verl, skyrl = as_trainer_batch(episodes, "verl"), as_trainer_batch(episodes, "skyrl")
    assert verl["reward_score"] == skyrl["rewards"] == [1.0] * 16
    assert verl["response_ids"][3] == episodes[3].trajectory.rows[0].completion_ids
    tinker = as_trainer_batch(episodes, "tinker")
    first = episodes[0].trajectory.rows[0]
    assert tinker["target_tokens"][0] == first.ids[1:]
    assert sum(tinker["weights"][0]) == sum(first.mask)


def _pids_dead(path: Path) -> bool:
    for pid in path.read_text().split():
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z":
            return False
    return True


@pytest.mark.parametrize("kind", ["crash", "hang", "unstartable"])
def test_a_failing_harness_ends_with_its_stop_reason_and_leaks_nothing(
        kind: str, gateway: Any, script: Any, tok: Any, tmp_path: Path) -> None:
    script.use(counter_player(tok))
    pids = tmp_path / "pids"
    commands = {
        "crash": ("sh", "-c", "echo boom >&2; exit 3"),
        # the harness and a child of its own, both waiting forever
        "hang": ("sh", "-c", f"sleep 600 & echo $! $$ > {pids}; wait"),
        "unstartable": ("/nonexistent/harness",),
    }
    harness = Harness(kind, command=commands[kind], prompt_via="stdin")
    ors = AsyncLocalBackend(COUNTER)

    async def main() -> Any:
        async with HarnessRunner(gateway, kill_grace=5) as runner:
            episode = await runner.run(harness, AsyncOrsEnv(backend=ors),
                                       options={"task_spec": {"target": 3}},
                                       deadline=5 if kind == "hang" else 60)
            assert count(runner, ors, gateway) == (0, 0, 0)
            return episode

    episode = asyncio.run(main())
    if kind == "crash":
        assert (episode.stop, episode.exit_status) == ("harness_failed", 3)
        assert "boom" in episode.stderr
        assert episode.trajectory.stop_reason == "env_error"
    elif kind == "hang":
        assert (episode.stop, episode.exit_status) == ("deadline", -signal.SIGTERM)
        assert episode.trajectory.stop_reason == "timeout"
        assert _pids_dead(pids)  # the whole process group was stopped
    else:
        assert episode.stop == "harness_failed" and episode.exit_status is None
        assert "/nonexistent/harness" in (episode.error or "")
    assert episode.calls == [] and episode.reward == 0.0


@pytest.mark.parametrize("reached", ["in-process", "over-http"])
def test_a_full_context_is_its_own_stop_reason(backend: Any, script: Any, tok: Any,
                                               reached: str) -> None:
    """Seen in the gateway's record of its refusals, in process and through its session
    API (as a remote worker's runner reads it)."""
    from ors_gym.gateway import Gateway, GatewayThread
    from ors_gym.harness import GatewayClient
    from ors_gym.sampling import VllmCompletions

    script.use(counter_player(tok))
    small = Gateway(tok, VllmCompletions(backend.base_url, "tiny"), model="tiny",
                    context_length=16)
    with GatewayThread(small):
        assert small.url is not None
        used = small if reached == "in-process" else GatewayClient(small.url, model="tiny")

        async def main() -> Any:
            async with HarnessRunner(used) as runner:
                return await runner.run(Harness("chat", call=chat_agent),
                                        AsyncOrsEnv(env_class=COUNTER),
                                        options={"task_spec": {"target": 3}}, deadline=60)

        episode = asyncio.run(main())
        if isinstance(used, GatewayClient):
            used.close()
    assert episode.stop == "context_full" and episode.exit_status == 1
    assert "context length" in (episode.error or "")
    assert episode.trajectory.stop_reason == "context_overflow"
    assert small.sessions == []


def test_the_harness_gets_its_prompt_model_and_mcp_server_in_its_forms(
        gateway: Any, script: Any, tok: Any, tmp_path: Path) -> None:
    """A harness command that copies what it was given: its argument, stdin, files and
    variables, in each configuration form."""
    out = tmp_path / "seen"
    copy = (f"mkdir -p {out}; cp -r . {out}/; printf %s \"$1\" > {out}/arg; "
            f"cat > {out}/stdin; env > {out}/env")
    harnesses = [
        Harness("json", command=("sh", "-c", copy, "sh", "{prompt}")),
        Harness("toml", command=("sh", "-c", copy, "sh", "{prompt}"), mcp_config="toml",
                mcp_config_path="home/config.toml", config_header='model = "{model}"\n',
                env={"MY_HOME": "{workdir}/home"}),
        Harness("stdio", command=("sh", "-c", copy, "sh", "x"), prompt_via="stdin",
                transport="stdio"),
        Harness("file", command=("sh", "-c", copy, "sh", "{prompt_file}"), prompt_via="file",
                files={"notes/readme.txt": "see {prompt_file}"}),
    ]
    for harness in harnesses:
        async def main(harness: Harness = harness) -> Any:
            async with HarnessRunner(gateway) as runner:
                return await runner.run(harness, AsyncOrsEnv(env_class=COUNTER),
                                        options={"task_spec": {"target": 4}}, deadline=60)

        episode = asyncio.run(main())
        assert episode.stop == "harness_exited", episode.stderr
        env = dict(line.split("=", 1) for line in (out / "env").read_text().splitlines()
                   if "=" in line)
        assert env["OPENAI_BASE_URL"].startswith(gateway.url) and env["ORS_MODEL"] == "tiny"
        assert env["ANTHROPIC_BASE_URL"].startswith(gateway.url)
        assert env["OPENAI_API_KEY"] == env["ANTHROPIC_API_KEY"]
        url = env["ORS_MCP_URL"]
        if harness.name == "json":
            assert (out / "arg").read_text().startswith("The counter is at 0. Make it equal 4")
            config = json.loads((out / "mcp.json").read_text())
            assert config == {"mcpServers": {"ors": {"type": "http", "url": url}}}
        elif harness.name == "toml":
            config = tomllib.loads((out / "home" / "config.toml").read_text())
            assert config == {"model": "tiny", "mcp_servers": {"ors": {"url": url}}}
            assert env["MY_HOME"].endswith("/home")
        elif harness.name == "stdio":
            assert (out / "stdin").read_text().startswith("The counter is at 0.")
            config = json.loads((out / "mcp.json").read_text())
            root = str(Path(__file__).resolve().parents[2])  # the ors_gym imported here
            assert config == {"mcpServers": {"ors": {
                "command": sys.executable, "args": ["-m", "ors_gym.mcp", url],
                "env": {"PYTHONPATH": root}}}}
        else:
            assert (out / "arg").read_text().endswith("task.md")
            assert (out / "task.md").read_text().startswith("The counter is at 0.")
            assert (out / "notes" / "readme.txt").read_text().endswith("task.md")
        assert episode.stop == "harness_exited" and episode.exit_status == 0
        for path in out.iterdir():  # the next harness copies into an empty folder
            if path.is_dir():
                import shutil

                shutil.rmtree(path)
            else:
                path.unlink()


def test_bad_harnesses_are_refused_with_what_to_fix() -> None:
    with pytest.raises(ValueError, match="needs a command or a call"):
        Harness("none")
    with pytest.raises(ValueError, match="no argument holds"):
        Harness("noprompt", command=("agent",))
    agent = Harness("x", command=("agent", "{prompt}"))
    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError, match="concurrency must be a positive int"):
            asyncio.run(run_batch(None, agent, lambda i: None, 2,  # type: ignore[arg-type]
                                  concurrency=bad))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prompt_via"):
        Harness("bad", command=("agent",), prompt_via="pipe")  # type: ignore[arg-type]


def test_credentials_a_harness_prints_are_not_kept(
        gateway: Any, script: Any, tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A credential of the runner's environment is not inherited, and the capture key and a
    credential given in the harness's ``env``, printed by the harness (as an agent listing
    its environment would), are hidden in the episode."""
    script.use(counter_player(tok))
    monkeypatch.setenv("HOST_API_KEY", "host-not-for-harnesses-0123")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # a setting, not a credential
    harness = Harness("printer", prompt_via="stdin", env={"MY_SERVICE_TOKEN": "tok-0123456"},
                      command=("sh", "-c", 'echo "key=$OPENAI_API_KEY"; '
                               'echo "host=$HOST_API_KEY tp=$TOKENIZERS_PARALLELISM"; '
                               'echo "token=$MY_SERVICE_TOKEN" >&2'))

    async def main() -> Any:
        async with HarnessRunner(gateway) as runner:
            return await runner.run(harness, AsyncOrsEnv(env_class=COUNTER),
                                    options={"task_spec": {"target": 2}}, deadline=60)

    episode = asyncio.run(main())
    assert episode.stop == "harness_exited", episode.stderr
    assert episode.stdout.split() == ["key=[redacted]", "host=", "tp=false"]
    assert episode.stderr.strip() == "token=[redacted]"
    kept = json.dumps(episode.to_json()) + repr(episode)
    assert "sk-ors-" not in kept and "tok-0123456" not in kept


def test_a_harness_shows_none_of_its_variables() -> None:
    harness = Harness("own", command=("agent", "{prompt}"),
                      env={"GITHUB_TOKEN": "ghp-not-for-logs"})
    assert "ghp-not-for-logs" not in repr(harness) and "'own'" in repr(harness)
