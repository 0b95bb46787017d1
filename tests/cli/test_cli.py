"""The ``ors-gym`` command line: ``serve`` in a real subprocess, ``list``, and usage errors."""

from __future__ import annotations

import logging
import os
import queue
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ors_gym.cli import build_parser, main, resolve_env_specs
from ors_gym.cli.args import UsageError
from ors_gym.envs import BUNDLED, DEFAULT_ENV
from ors_gym.envs.testing import TEST_ENVS

_URL = re.compile(r"^ors-gym: serving (?P<names>.+) at (?P<url>http://\S+)$")
_STARTUP_TIMEOUT_S = 120.0


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "OPENREWARD_DISABLE_UPDATE_CHECK": "1",
        "OPENREWARD_LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ors_gym", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _read_serving_line(proc: subprocess.Popen[str]) -> re.Match[str]:
    """The ``ors-gym: serving ... at URL`` line, read with a bounded wait."""
    assert proc.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=_STARTUP_TIMEOUT_S)
        except queue.Empty:
            pytest.fail(f"no 'serving' line within {_STARTUP_TIMEOUT_S} s; stdout so far: {seen}")
        if line is None:
            stderr = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"ors-gym exited ({proc.wait()}) before serving: {seen} {stderr}")
        seen.append(line)
        match = _URL.match(line)
        if match:
            return match


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[re.Match[str]]:
    """``python -m ors_gym serve <request.param...> --port 0``; yields the serving-line match."""
    proc = _start("serve", *request.param, "--port", "0")
    try:
        yield _read_serving_line(proc)
    finally:
        _stop(proc)


@pytest.mark.parametrize("served", [["gridworld"]], indirect=True)
def test_serve_one_bundled_env(served: re.Match[str]) -> None:
    url = served["url"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url) and not url.endswith(":0")
    assert served["names"] == "gridworld"
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/list_environments").json() == ["gridworld"]
        assert [t["name"] for t in client.get("/gridworld/tools").json()["tools"]] == ["move"]


@pytest.mark.parametrize("served", [[]], indirect=True)
def test_serve_defaults_to_every_bundled_env(served: re.Match[str]) -> None:
    with httpx.Client(base_url=served["url"], timeout=30) as client:
        names = client.get("/list_environments").json()
    assert names[0] == DEFAULT_ENV.lower()
    assert sorted(names) == sorted(n.lower() for n in BUNDLED)


def test_serve_reports_a_busy_port() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "ors_gym", "serve", "math", "--port", str(port)],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=_STARTUP_TIMEOUT_S,
        )
    assert done.returncode == 3, done.stderr
    assert f"could not serve on 127.0.0.1:{port}" in done.stderr


def test_every_exit_code_is_documented() -> None:
    from ors_gym.cli import args

    codes = {getattr(args, name) for name in args.__all__ if name.startswith("EXIT_")}
    assert {0, 1, 2, 3, 130} <= codes
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md").read_text()
    table = page.partition("## Exit codes")[2].partition("\n## ")[0]
    documented = {int(c) for c in re.findall(r"^\| `(\d+)` \|", table, re.MULTILINE)}
    assert documented == codes


def test_train_takes_env_first_and_warns_of_a_left_out_terminal_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA's reward comes only through its free-text terminal tool, which the numbered
    actions cannot hold: train says so (naming it) instead of training in silence."""
    code = main(["train", "ors/QA-v0", "--obs", "text", "--steps", "8", "--n-envs", "1",
                 "--eval-episodes", "1", "--no-progress-bar", "--out-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "PPO on ors/QA-v0" in out  # ENV as the first argument, as eval takes it
    warning = [line for line in err.splitlines() if line.startswith("ors-gym train: warning:")]
    assert len(warning) == 1, err
    assert "terminal tool 'answer'" in warning[0] and "hint()" in warning[0]
    assert "DiscreteToolActions(env, calls=[...])" in warning[0]
    # An environment without a terminal tool (its move ends the episode) gets no warning.
    assert main(["train", "--env", "ors/GridWorld-v0", "--obs", "text", "--steps", "8",
                 "--n-envs", "1", "--eval-episodes", "1", "--no-progress-bar", "--out-dir",
                 str(tmp_path / "grid")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_train_refuses_two_different_environments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "ors/QA-v0", "--env", "ors/Counter-v0"]) == 2
    assert "two environments given" in capsys.readouterr().err


def test_unknown_env_exits_2_in_a_subprocess() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ors_gym", "serve", "nosuchenv"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=_STARTUP_TIMEOUT_S,
    )
    assert done.returncode == 2
    assert "unknown environment 'nosuchenv'" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "gridworld", "nosuch"], "unknown environment 'nosuch'"),
        (["serve", "ors_gym.envs.math:Nope"], "cannot load environment"),
        (["serve", "no_such_module_xyz:Env"], "cannot load environment"),
        (["serve", "ors_gym.envs.gridworld:deque"], "not a subclass"),
        (["serve", "--port", "70000"], "port must be from 0 to 65535"),
        (["serve", "--port", "http"], "port must be an integer"),
        (["launch"], "invalid choice"),
        ([], "required"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.out == ""


def test_list_prints_each_id_with_where_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(BUNDLED) + 1
    assert lines[0].split() == [f"ors/{DEFAULT_ENV}-v0", "in-process", BUNDLED[DEFAULT_ENV],
                                "(default)"]
    for name, spec in BUNDLED.items():
        (line,) = [ln for ln in lines if ln.split()[0] == f"ors/{name}-v0"]
        assert line.split()[1:3] == ["in-process", spec]
    assert lines[-1].split()[:3] == ["ors/Remote-v0", "any", "server"]


def test_list_with_a_server_shows_its_remote_ids(
    server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list", "--server", server_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    remote = [ln.split() for ln in lines if ln.startswith("ors-remote/")]
    assert len(remote) == len(BUNDLED) + len(TEST_ENVS)  # the suite's server hosts both
    assert ["ors-remote/Math-v0", server_url, "math"] in remote
    assert ["ors-remote/GridWorld-v0", server_url, "gridworld"] in remote
    # No id differs from another by case alone.
    ids = [ln.split()[0] for ln in lines]
    assert len({i.lower() for i in ids}) == len(ids)


def test_list_with_a_bad_server_url_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "--server", "ftp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ors-gym list: error: cannot list")
    assert "http(s) URL" in err[0]


def test_resolve_env_specs() -> None:
    assert resolve_env_specs([]) == [
        BUNDLED[DEFAULT_ENV],
        *(s for n, s in BUNDLED.items() if n != DEFAULT_ENV),
    ]
    assert resolve_env_specs(["MATH", "qa", "pkg.mod:Env", "Math"]) == [
        BUNDLED["Math"],
        BUNDLED["QA"],
        "pkg.mod:Env",
    ]
    # The test environments are served by module:Class only, never by name.
    assert resolve_env_specs([TEST_ENVS["Echo"]]) == ["ors_gym.envs.testing.echo:Echo"]
    with pytest.raises(UsageError, match="unknown environment 'echo'"):
        resolve_env_specs(["echo"])


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert "ors-gym 0." in out and "--port" in out


def test_each_subcommand_is_one_function() -> None:
    """Adding a subcommand = appending one ``add_parser`` function to ``SUBCOMMANDS``."""
    from ors_gym import cli

    def add_hello(subparsers: object) -> None:
        parser = subparsers.add_parser("hello")  # type: ignore[attr-defined]
        parser.set_defaults(handler=lambda args: 7)

    cli.SUBCOMMANDS.append(add_hello)
    try:
        assert main(["hello"]) == 7
    finally:
        cli.SUBCOMMANDS.remove(add_hello)
    assert "hello" not in build_parser().format_help()


def test_train_library_never_imports_the_cli() -> None:
    """``ors_gym.train`` is a library: importing it loads no part of ``ors_gym.cli``."""
    code = (
        "import sys, ors_gym.train; "
        "print(sorted(m for m in sys.modules if m.startswith('ors_gym.cli')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--env-id", "ors/Math-v0"], "tool 'submit': required parameter 'answer' has no finite"),
        (["--env-id", "ors/Counter-v0", "--obs", "vector"],
         "no agent/goal positions for --obs vector"),
    ],
)
def test_train_on_an_untrainable_env_is_one_line_exit_2(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Run here, as the other usage errors are (a fresh interpreter would spend its time
    importing the SDK). What a shell would show besides the one line: a traceback (an
    exception escaping ``main``), or a log record at WARNING or above (logging's
    last-resort handler prints those on stderr), e.g. from probing the environments."""
    caplog.set_level(logging.WARNING)
    code = main(["train", *argv, "--out-dir", "/nonexistent/never"])
    done = capsys.readouterr()
    assert code == 2
    assert done.out == ""
    assert not caplog.records, caplog.text
    lines = done.err.strip().splitlines()
    assert len(lines) == 1, done.err
    (line,) = lines
    assert line.startswith(f"ors-gym train: error: cannot train on {argv[1]}: ")
    assert reason in line
    assert "Traceback" not in line
    # It names what can be trained, and how.
    assert "ors/GridWorld-v0 (--obs vector, image or text)" in line
    assert "ors/Counter-v0 (--obs text)" in line
    assert "ors/Math-v0 (" not in line
    assert "DiscreteToolActions(env, calls=[...])" in line


def test_train_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from ors_gym.train import DEFAULT_STEPS

    assert main(["train", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for option, default in [
        ("--algo", "PPO"),
        ("--steps", str(DEFAULT_STEPS)),
        ("--out-dir", "runs/train"),
        ("--eval-episodes", "50"),
    ]:
        shown = rf"{re.escape(option)} \S+ [^()]*\(default: {re.escape(default)}\)"
        assert re.search(shown, out), option


def test_serve_keeps_the_shell_env_off_public_addresses() -> None:
    from ors_gym.cli.args import UsageError
    from ors_gym.cli.serve import guard_shell, resolve_env_specs
    from ors_gym.envs import BUNDLED

    every = resolve_env_specs([])
    shell = BUNDLED["Sandbox"]
    assert shell in guard_shell(every, "127.0.0.1", named=False, allow_shell=False)
    public = guard_shell(every, "0.0.0.0", named=False, allow_shell=False)
    assert shell not in public and len(public) == len(every) - 1
    assert shell in guard_shell(every, "0.0.0.0", named=False, allow_shell=True)
    with pytest.raises(UsageError, match="allow-shell"):
        guard_shell(resolve_env_specs(["sandbox"]), "0.0.0.0", named=True, allow_shell=False)


def test_python_dash_m_ors_gym_cli_runs_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "ors_gym.cli", "--version"],
                          capture_output=True, text=True, env=_env(), timeout=_STARTUP_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ors-gym ")
