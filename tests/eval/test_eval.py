"""``ors-gym eval`` / ``ors_gym.eval.evaluate`` against a real OpenAI-compatible HTTP server.

The server (``tests/_openai_server.py``) answers from ``ScriptedLLM``; the
evaluation talks to it through the real ``openai`` client (``AsyncOpenAI``).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from ors_gym.cli import main
from ors_gym.eval import evaluate, format_summary, mean_interval
from ors_gym.trajectories import FORMAT, read_trajectories, trajectory_messages
from tests._openai_server import OpenAIServer

pytest.importorskip("openai")


def test_tool_calls_through_the_openai_client(tmp_path: Path) -> None:
    with OpenAIServer() as srv:
        summary = evaluate("ors/GridWorld-v0", "test-model", srv.base_url, episodes=4,
                           concurrency=2, out=tmp_path)
    assert srv.models == {"test-model"} and srv.requests == sum(
        r["length"] for r in read_trajectories(tmp_path / "trajectories.jsonl"))
    assert summary["episodes"] == 4 and summary["success_rate"] == 1.0
    assert summary["errors"] == {} and summary["usage"]["total_tokens"] > 0
    records = read_trajectories(tmp_path / "trajectories.jsonl")
    assert [r["episode"] for r in records] == [0, 1, 2, 3]
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    for record in records:
        assert record["format"] == FORMAT and record["model"] == "test-model"
        assert record["terminated"] and record["complete"]
        step = record["steps"][0]
        assert step["tool_calls"][0]["name"] == "move"
        assert step["tool_calls"][0]["id"].startswith("call_")  # the model's own call id
        assert step["results"][0]["tool_call_id"] == step["tool_calls"][0]["id"]
        assert step["usage"]["prompt_tokens"] > 0
        assert record["usage"]["total_tokens"] == sum(
            s["usage"]["total_tokens"] for s in record["steps"])
        image = record["prompt_content"][1]
        assert image["type"] == "image" and image["data"]  # kept for the viewer
        assert len(trajectory_messages(record)) == 1 + 2 * record["length"]
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["mean_reward"] == pytest.approx(summary["mean_reward"])
    assert (tmp_path / "report.html").read_text().count('class="episode"') == 4


def test_plain_answers_are_graded_by_the_terminal_tool(tmp_path: Path) -> None:
    with OpenAIServer() as srv:
        summary = evaluate("ors/QA-v0", "qa-model", srv.base_url, episodes=3, concurrency=3,
                           out=tmp_path)
    records = read_trajectories(tmp_path / "trajectories.jsonl")
    assert summary["episodes"] == 3
    for record in records:
        last = record["steps"][-1]
        assert last["tool_calls"] == [] and last["message"]  # a plain answer...
        assert [r["name"] for r in last["results"]] == ["answer"]  # ...graded by `answer`
        assert last["results"][0]["tool_call_id"] is None and record["terminated"]


def test_an_endpoint_error_mid_run_is_typed_counted_and_the_run_goes_on(tmp_path: Path) -> None:
    with OpenAIServer(fail={3: 500}) as srv:
        summary = evaluate("ors/Math-v0", "m", srv.base_url, episodes=6, concurrency=2,
                           out=tmp_path, max_retries=0)
    assert srv.failed == 1 and srv.requests == 6
    assert summary["episodes"] == 6 and summary["errored_episodes"] == 1
    assert summary["errors"] == {"endpoint_http_500": 1}
    records = read_trajectories(tmp_path / "trajectories.jsonl")
    failed = [r for r in records if r["error"]]
    assert len(failed) == 1 and failed[0]["ended_by"] == "error"
    assert failed[0]["error"]["reason"] == "endpoint_http_500"
    assert not failed[0]["complete"] and failed[0]["steps"] == []
    assert all(r["total_reward"] == 1.0 for r in records if not r["error"])
    assert "endpoint_http_500: 1" in format_summary(summary)


def test_the_client_retries_a_failed_request(tmp_path: Path) -> None:
    with OpenAIServer(fail={1: 503}) as srv:
        summary = evaluate("ors/Math-v0", "m", srv.base_url, episodes=1, concurrency=1,
                           out=None, max_retries=1)
    assert srv.requests == 2 and summary["errors"] == {} and summary["mean_reward"] == 1.0


def test_concurrency_8_against_1(tmp_path: Path) -> None:
    """K=8 against K=1 on a server with 20 ms of model latency: the factor is printed."""
    seconds = {}
    with OpenAIServer(latency=0.02) as srv:
        for k in (1, 8):
            start = time.perf_counter()
            summary = evaluate("ors/Math-v0", "m", srv.base_url, episodes=32, concurrency=k,
                               out=tmp_path / f"k{k}")
            seconds[k] = time.perf_counter() - start
            assert summary["episodes"] == 32 and summary["mean_reward"] == 1.0
    print(f"\neval concurrency: K=1 {seconds[1]:.2f} s, K=8 {seconds[8]:.2f} s, "
          f"K=8 is {seconds[1] / seconds[8]:.1f}x faster")


def test_scripted_model_needs_no_endpoint(tmp_path: Path) -> None:
    summary = evaluate("ors/Counter-v0", "scripted", episodes=3, concurrency=2, out=tmp_path)
    assert summary["model"] == "scripted" and summary["success_rate"] == 1.0
    assert summary["usage"] is None  # no endpoint, no token counts


def test_cli_eval_prints_the_table_and_shows_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIServer() as srv:
        code = main(["eval", "ors/Math-v0", "--model", "cli-model", "--base-url", srv.base_url,
                     "--episodes", "5", "--concurrency", "2", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0
    for label in ("episodes", "mean reward", "95% CI", "success rate", "mean turns", "errors",
                  "wall time"):
        assert label in out
    assert "5/5" in err  # the progress bar ends at the episodes asked
    assert (tmp_path / "report.html").exists() and (tmp_path / "summary.json").exists()


def test_cli_eval_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "ors/Math-v0", "--model", "gpt-x", "--out", str(tmp_path)]) == 2
    assert "needs --base-url" in capsys.readouterr().err
    assert main(["eval", "ors/Nope-v0", "--model", "scripted", "--out", str(tmp_path)]) == 2
    assert "unknown environment 'ors/Nope-v0'" in capsys.readouterr().err


def test_mean_interval_stays_within_the_rewards() -> None:
    assert mean_interval([1.0]) == (1.0, 1.0, 1.0)
    mean, low, high = mean_interval([0.0, 1.0, 0.0, 1.0])
    assert mean == 0.5 and 0.0 <= low < 0.5 < high <= 1.0
    assert mean_interval([0.0, 1.0, 0.0, 1.0]) == (mean, low, high)  # seeded: reproducible
    # one success in five: a Student t interval would reach below 0
    mean, low, high = mean_interval([0.0, 0.0, 0.0, 0.0, 1.0])
    assert mean == pytest.approx(0.2) and low == 0.0 and high <= 1.0


def test_an_unreachable_endpoint_exits_1_and_is_not_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = main(["eval", "ors/Math-v0", "--model", "m", "--base-url",
                 f"http://127.0.0.1:{port}/v1", "--episodes", "3", "--max-retries", "0",
                 "--out", str(tmp_path), "--no-progress-bar"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "3 of 3 episodes failed outside the model (endpoint_connection: 3)" in err
    assert "--max-errors" not in err  # not given, so not named
    # What the library logs on the way reaches the user too.
    assert "ors-gym eval: warning: episode 0: the model endpoint failed" in err

    def strict(name: str) -> None:
        raise AssertionError(f"summary.json holds {name}, which is not JSON")

    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=strict)
    assert summary["failed_episodes"] == 3 and summary["scored_episodes"] == 0
    for figure in ("mean_reward", "reward_ci95", "success_rate", "mean_turns"):
        assert summary[figure] is None, figure  # null, not 0.0 or NaN: nothing was scored
    assert "3 failed outside the model, not scored" in out
    assert "n/a (no episode scored)" in out and "nan" not in out
    page = (tmp_path / "report.html").read_text()
    summary_table = page.partition('id="summary">')[2].partition("</table>")[0]
    assert "n/a (no episode scored)" in summary_table and "nan" not in summary_table


def test_a_new_run_never_silently_replaces_an_earlier_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", "ors/Counter-v0", "--model", "scripted", "--episodes", "2",
            "--out", str(tmp_path), "--no-progress-bar"]
    assert main(argv) == 0
    first = (tmp_path / "trajectories.jsonl").read_bytes()
    capsys.readouterr()
    assert main([*argv[:5], "3", *argv[6:]]) == 2
    err = capsys.readouterr().err
    assert "already holds an evaluation" in err and "--overwrite" in err
    assert "overwrite=True" not in err  # the command line's word for it, not Python's
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "trajectories.jsonl").read_bytes() == first  # untouched
    assert main([*argv[:5], "3", *argv[6:], "--overwrite"]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["episodes"] == 3
    with pytest.raises(FileExistsError, match="overwrite=True"):
        evaluate("ors/Counter-v0", "scripted", episodes=1, out=tmp_path)


def test_max_errors_is_the_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with OpenAIServer(fail={2: 500}) as srv:
        argv = ["eval", "ors/Math-v0", "--model", "m", "--base-url", srv.base_url,
                "--episodes", "4", "--concurrency", "1", "--max-retries", "0",
                "--out", str(tmp_path), "--no-progress-bar"]
        assert main(argv) == 0  # one failure of four: the default tolerates it
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["failed_episodes"] == 1 and summary["mean_reward"] == 1.0
        srv.fail = {srv.requests + 1: 500}
        assert main([*argv, "--max-errors", "0", "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "1 of 4 episodes failed outside the model" in err
    assert "more than --max-errors 0" in err


def test_a_bundled_id_evaluated_on_an_ors_server(tmp_path: Path, server_url: str) -> None:
    """``env_options={"base_url": ...}`` (``--env-url``): the same id, over HTTP."""
    summary = evaluate("ors/Math-v0", "scripted", episodes=2, concurrency=2, out=tmp_path,
                       env_options={"base_url": server_url})
    assert summary["mean_reward"] == 1.0
    records = read_trajectories(tmp_path / "trajectories.jsonl")
    assert {r["env_name"] for r in records} == {"math"}
    assert {r["server"] for r in records} == {server_url}


def test_a_registered_remote_id(tmp_path: Path, server_url: str) -> None:
    import ors_gym

    ids = ors_gym.register_server(server_url)
    (math_id,) = [i for i in ids if "Math" in i]
    summary = evaluate(math_id, "scripted", episodes=2, concurrency=2, out=None)
    assert summary["env_id"] == math_id and summary["mean_reward"] == 1.0
