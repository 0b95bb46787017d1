"""The bundled Sandbox environment (SDK ``CLIToolset`` over a ``LocalSandbox``), both backends.

Every command run here is written in this file: Sandbox runs real shell
commands on this machine, so it is never fed sampled actions (see the
exclusions in test_parity.py and test_env.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ors_gym.env import OrsEnv
from ors_gym.envs import BUNDLED
from ors_gym.envs._local_sandbox import FileTooLargeError, FileTransferError, LocalSandbox
from ors_gym.envs.sandbox import KINDS, Sandbox
from ors_gym.registration import BUNDLED_MAX_STEPS
from ors_gym.serving import ServerThread

CLI_TOOLS = {"bash", "glob", "grep", "ls", "read", "write", "edit", "multi_edit", "todo_write"}
SECRET = "sk-test-do-not-leak-4242"


@pytest.fixture(scope="module")
def sandbox_url() -> Iterator[str]:
    with ServerThread([Sandbox]) as srv:
        yield srv.url


@pytest.fixture(params=["local", "http"])
def make(request: pytest.FixtureRequest, sandbox_url: str) -> Iterator[Any]:
    """``make()``: a Sandbox OrsEnv over the parametrized backend, closed after the test."""
    made: list[OrsEnv] = []

    def factory() -> OrsEnv:
        if request.param == "http":
            env = OrsEnv(base_url=sandbox_url, env_name="sandbox", max_steps=20)
        else:
            env = OrsEnv(env_class=Sandbox, max_steps=20)
        made.append(env)
        return env

    yield factory
    for env in made:
        env.close()


def call(env: OrsEnv, name: str, **arguments: Any) -> tuple[dict[str, Any], float, bool]:
    """One tool call: (the call's record, reward, terminated)."""
    _, reward, terminated, _, info = env.step(
        {"tool_calls": [{"name": name, "arguments": arguments}]}
    )
    (record,) = info["calls"]
    assert record["ok"], record
    return record, float(reward), terminated


def bash(env: OrsEnv, command: str, **extra: Any) -> dict[str, Any]:
    """The metadata (output, exit_code, flags) and text of a bash call."""
    record, _, _ = call(env, "bash", command=command, **extra)
    return {**record["metadata"], "text": record["blocks"][0].text}


def custom(env: OrsEnv, **spec: Any) -> str:
    """Reset to a hand-written task; the prompt text."""
    obs, _ = env.reset(options={"task_spec": {"prompt": "Chores.", "answer": "x", **spec}})
    return str(obs["text"])


# -- the scripted policy: a fixed sequence of tool calls per kind of task --------------------


def _write_file(env: OrsEnv, prompt: str) -> str:
    line = re.search(r"whose only line is: (.+)", prompt).group(1)  # type: ignore[union-attr]
    call(env, "write", file_path="greeting.txt", content=line)
    assert bash(env, "cat greeting.txt")["output"] == line + "\n"
    return ""


def _count_lines(env: OrsEnv, prompt: str) -> str:
    out = bash(env, "wc -l < data.txt")
    assert out["exit_code"] == 0
    return str(out["output"]).strip()


def _find_word(env: OrsEnv, prompt: str) -> str:
    word = re.search(r"the word '(\w+)'", prompt).group(1)  # type: ignore[union-attr]
    record, _, _ = call(env, "grep", pattern=word, path="notes")
    (hit,) = str(record["metadata"]["output"]).splitlines()
    return hit.split(":", 1)[0]


def _fix_typo(env: OrsEnv, prompt: str) -> str:
    wrong, right = re.findall(r"'(\w+)'", prompt)
    record, _, _ = call(env, "edit", file_path="story.txt", old_string=wrong, new_string=right)
    assert "Successfully edited" in record["blocks"][0].text
    record, _, _ = call(env, "read", file_path="story.txt")
    assert right in record["metadata"]["output"] and wrong not in record["metadata"]["output"]
    return ""


POLICY = {
    "write_file": _write_file,
    "count_lines": _count_lines,
    "find_word": _find_word,
    "fix_typo": _fix_typo,
}


def test_registered_in_bundled() -> None:
    assert BUNDLED["Sandbox"] == "ors_gym.envs.sandbox:Sandbox"
    assert BUNDLED_MAX_STEPS["Sandbox"] == 20
    assert set(POLICY) == set(KINDS)


def test_tools_are_the_cli_toolset_and_submit(make: Any) -> None:
    env = make()
    obs, info = env.reset(seed=0)
    names = {t["name"] for t in info["tools"]}
    assert names == CLI_TOOLS | {"submit"}
    assert "submit" in obs["text"] and "fresh folder" in obs["text"]


@pytest.mark.parametrize("split", ["train", "test"])
def test_scripted_policy_solves_every_task(make: Any, split: str) -> None:
    env = make()
    kinds = []
    for index in range(env.num_tasks(split)):
        obs, info = env.reset(options={"split": split, "index": index})
        kind = info["task_spec"]["kind"]
        kinds.append(kind)
        answer = POLICY[kind](env, obs["text"])
        record, reward, terminated = call(env, "submit", answer=answer)
        assert (reward, terminated) == (1.0, True), (split, index, record)
        assert record["metadata"]["correct"] is True
    assert set(kinds) == set(KINDS)


def test_wrong_answers_and_unfinished_chores_get_zero(make: Any) -> None:
    env = make()
    env.reset(options={"split": "test", "index": KINDS.index("count_lines")})
    record, reward, terminated = call(env, "submit", answer="-1")
    assert (reward, terminated) == (0.0, True)
    assert "not the expected one" in record["blocks"][0].text

    env.reset(options={"split": "test", "index": KINDS.index("write_file")})
    call(env, "write", file_path="greeting.txt", content="goodbye")
    record, reward, terminated = call(env, "submit", answer="")
    assert (reward, terminated) == (0.0, True)
    assert record["metadata"]["problems"] == ["greeting.txt does not hold the expected content"]

    env.reset(options={"split": "test", "index": KINDS.index("fix_typo")})
    bash(env, "rm story.txt")
    _, reward, _ = call(env, "submit", answer="")
    assert reward == 0.0


def test_time_limit_kills_the_command(make: Any) -> None:
    env = make()
    prompt = custom(env, time_limit=1.0)
    assert "may run 1 s" in prompt
    start = time.monotonic()
    out = bash(env, "echo before; sleep 100; echo after")
    elapsed = time.monotonic() - start
    assert elapsed < 10  # limit 1 s; the margin is for a slow machine, not for sleep 100
    assert out["timed_out"] is True and out["exit_code"] == 124
    assert out["output"] == "before\n"
    assert "time limit and was killed" in out["text"]
    # A call may shorten the limit but not extend it.
    start = time.monotonic()
    assert bash(env, "sleep 100", timeout=600)["timed_out"] is True
    assert time.monotonic() - start < 10
    # What a command leaves running in the background is killed when it returns, and
    # does not keep the call waiting until the limit.
    out = bash(env, "sleep 100 & echo started")
    assert (out["output"], out["exit_code"]) == ("started\n", 0) and "timed_out" not in out


def test_output_past_the_cap_is_cut_with_a_note(make: Any) -> None:
    env = make()
    custom(env, output_limit=100)
    out = bash(env, "head -c 5000 /dev/zero | tr '\\0' x; echo; echo done > marker")
    assert out["output"] == "x" * 100
    assert out["truncated"] is True and out["exit_code"] == 0
    assert "output exceeded the limit and was cut off" in out["text"]
    assert bash(env, "cat marker")["output"] == "done\n"  # the command ran to the end
    exact = bash(env, "head -c 100 /dev/zero | tr '\\0' y")
    assert exact["output"] == "y" * 100 and "truncated" not in exact


def test_commands_see_a_scrubbed_environment(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENREWARD_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    env = make()
    custom(env)
    out = bash(env, "env; echo HOME_IS=$HOME PWD_IS=$(pwd)")
    assert SECRET not in out["output"]
    assert "OPENREWARD_API_KEY" not in out["output"]
    names = {line.split("=", 1)[0] for line in out["output"].splitlines() if "=" in line}
    assert names - {"HOME_IS", "_"} <= {"PATH", "HOME", "LANG", "PWD", "SHLVL", "OLDPWD"}
    home, pwd = re.search(r"HOME_IS=(\S+) PWD_IS=(\S+)", out["output"]).groups()  # type: ignore[union-attr]
    assert home == pwd


def test_the_folder_is_gone_after_reset_and_close(make: Any) -> None:
    env = make()
    env.reset(options={"split": "train", "index": 2})
    first = Path(bash(env, "pwd")["output"].strip())
    assert (first / "notes" / "a.txt").is_file()
    env.reset(options={"split": "train", "index": 2})
    second = Path(bash(env, "pwd")["output"].strip())
    assert second != first and second.is_dir()
    assert not first.exists()  # reset ended the old session
    env.close()
    assert not second.exists()


def test_relative_file_tools_stay_in_the_folder(make: Any) -> None:
    env = make()
    custom(env, files={"a/b.txt": "one\ntwo\n"})
    record, _, _ = call(env, "read", file_path="a/b.txt")
    assert record["metadata"]["output"] == "1\tone\n2\ttwo\n"
    call(env, "write", file_path="c/d.txt", content="new")
    record, _, _ = call(env, "glob", pattern="*.txt")
    assert record["metadata"]["output"].split() == ["./a/b.txt", "./c/d.txt"]
    record, _, _ = call(env, "read", file_path="missing.txt")
    assert "Error reading file" in record["blocks"][0].text


def test_bad_task_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="'answer' or 'expect_files'"):
        Sandbox({"prompt": "nothing to grade"})
    with pytest.raises(ValueError, match="stay inside"):
        Sandbox({"prompt": "p", "answer": "a", "files": {"../x": "y"}})


def test_local_sandbox_client_methods(tmp_path: Path) -> None:
    """The client interface beyond what the toolset exercises: upload, check_run, limits."""

    async def scenario() -> Path:
        source = tmp_path / "in.bin"
        source.write_bytes(b"\x00\x01 payload")
        async with LocalSandbox({"x.txt": "x"}, timeout=5, max_bytes=1000) as box:
            root = box.root
            assert root is not None and (root / "x.txt").read_text() == "x"
            await box.upload(source, "copy.bin")
            assert await box.download("copy.bin") == b"\x00\x01 payload"
            assert await box.check_run("cat x.txt") == "x"
            with pytest.raises(RuntimeError, match="Command failed"):
                await box.check_run("exit 3")
            output, code = await box.run("exit 7")
            assert (output, code) == ("", 7)
            assert (await box.run("kill -9 $$")).return_code == 137
            long = "echo " + "z" * 150_000 + " > long.txt; wc -c < long.txt"
            assert (await box.run(long)).output.strip() == "150001"
            with pytest.raises(FileTransferError, match="no such file"):
                await box.download("nope.txt")
            if os.geteuid() != 0:  # root reads a mode-000 file all the same
                await box.run("echo secret > hidden.txt; chmod 000 hidden.txt")
                with pytest.raises(FileTransferError, match="Permission denied"):
                    await box.download("hidden.txt")
            with pytest.raises(FileTooLargeError):
                await box.download("x.txt", max_size=0)
            chmod = await box.run("mkdir -p locked/inner && chmod 000 locked")
            assert chmod.return_code == 0
        return root

    root = asyncio.run(scenario())
    assert not root.exists()
    with pytest.raises(RuntimeError, match="not running"):
        asyncio.run(LocalSandbox().run("true"))
