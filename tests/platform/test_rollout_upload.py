"""Rollout upload: what ``RolloutUploader`` sends matches the SDK's ``client.rollout``, a step
never waits for it, a failed post is sent again, and nothing is lost at exit."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from ors_gym.env import OrsEnv
from ors_gym.platform import RolloutUploader
from ors_gym.platform._events import LogEntry, log_entries
from ors_gym.trajectories import read_trajectories
from ors_gym.wrappers import RecordTrajectories
from tests._fault_servers import CuttingProxy
from tests._platform import DEPLOYMENT, KEY, Platform

ECHO = "ors_gym.envs.testing.echo:Echo"
RUN_INFO = {"model_name": "tiny-1", "run_type": "eval"}


def _episode(env: Any, index: int = 0) -> None:
    env.reset(options={"split": "train", "index": index})
    env.step({"tool_calls": [{"name": "echo", "arguments": {"text": "hi"}}]})
    _, reward, terminated, _, _ = env.step(
        {"message": "done", "tool_calls": [{"name": "finish", "arguments": {"reward": 0.5}}]})
    assert terminated and reward == 0.5


def _normalized(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events with their ids replaced by the order they first appear, timestamps left out."""
    labels: dict[str, str] = {}
    out = []
    for event in events:
        item = {k: v for k, v in event.items() if k != "timestamp"}
        for key in ("eventId", "rolloutEventId"):
            if key in item:
                item[key] = labels.setdefault(item[key], f"id{len(labels)}")
        out.append(item)
    return out


def _sdk_message(entry: LogEntry) -> Any:
    from openreward.api.rollouts.serializers import base

    if entry.type == "tool_call":
        return base.ToolCall(name=str(entry.name), content=str(entry.content),
                             call_id=str(entry.call_id))
    if entry.type == "tool_result":
        return base.ToolResult(content=str(entry.content), call_id=str(entry.call_id))
    if entry.type == "reasoning":
        return base.ReasoningItem(content=entry.content)
    kind = {"user_message": base.UserMessage, "assistant_message": base.AssistantMessage}
    return kind[entry.type](content=str(entry.content))


def test_an_uploaded_episode_is_the_sdks_rollout(platform: Platform, tmp_path: Path) -> None:
    from openreward import OpenReward
    from openreward.models import RolloutInfo, RunInfo

    platform.ids[DEPLOYMENT] = "env-7"
    uploader = RolloutUploader("run-a", run_info=RUN_INFO)
    with RecordTrajectories(OrsEnv(deployment=DEPLOYMENT), tmp_path / "t.jsonl",
                            upload=uploader) as env:
        _episode(env)
    assert uploader.flush(30)
    ours = platform.received_events()
    our_requests = [(r.method, r.path) for r in platform.requests("/v1/")]
    (record,) = read_trajectories(tmp_path / "t.jsonl")
    (update,) = [e for e in ours if e["eventType"] == "rollout_update"]
    uploader.close()
    platform.clear()

    client = OpenReward(api_key=KEY)
    rollout = client.rollout.create(
        "run-a", environment=DEPLOYMENT, split=record["split"], task_spec=record["task_spec"],
        run_info=RunInfo(**RUN_INFO))  # type: ignore[arg-type]
    entries = log_entries(record)
    for n, entry in enumerate(entries):
        info = (RolloutInfo(**update["rollout_info"]) if n == len(entries) - 1 else None)
        rollout.log(_sdk_message(entry), reward=entry.reward, is_finished=entry.is_finished,
                    rollout_info=info)
    client.rollout.close()
    client.close()
    theirs = platform.received_events()

    assert _normalized(ours) == _normalized(theirs)
    assert [e["type"] for e in ours if e["eventType"] == "message"] == [
        "user_message", "tool_call", "tool_result", "assistant_message", "tool_call",
        "tool_result"]
    assert ours[0]["environment_id"] == "env-7" and update["rollout_info"]["task_index"] == 0
    assert ours[-1]["reward"] == 0.5 and ours[-1]["isFinished"] is True
    their_requests = [(r.method, r.path) for r in platform.requests("/v1/")]
    assert set(our_requests) == set(their_requests) == {
        ("GET", "/v1/environments/Acme/tools"), ("POST", "/v1/rollouts")}
    assert all(r.headers["x-api-key"] == KEY for r in platform.requests("/v1/rollouts"))


def test_a_step_never_waits_for_an_upload_and_a_failed_post_is_resent(
    platform: Platform, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    platform.hold = threading.Event()  # the platform answers no upload until set
    platform.fail_rollouts = 1
    uploader = RolloutUploader("run-b", max_age=0.0, backoff=0.01)

    def episodes() -> None:
        with RecordTrajectories(OrsEnv(env_class=ECHO), tmp_path / "t.jsonl",
                                upload=uploader) as env:
            for index in range(3):
                _episode(env, index)

    runner = threading.Thread(target=episodes)
    runner.start()
    runner.join(60)  # a step waiting for the held upload would never end
    assert not runner.is_alive()
    # Every episode finished while the platform answered no upload.
    assert platform.received_events() == [] and uploader.sent == 0
    platform.hold.set()
    uploader.close()
    events = platform.received_events()
    assert platform.fail_rollouts == 0  # the 503 was answered, and the batch sent again
    assert sorted(e["rollout_info"]["task_index"] for e in events
                  if e["eventType"] == "rollout_update") == [0, 1, 2]
    assert len({e["eventId"] for e in events if e["eventType"] != "rollout_update"}) == len(
        [e for e in events if e["eventType"] != "rollout_update"])  # each once
    assert len(events) == 3 * (1 + 6 + 1) and uploader.failed == 0
    assert KEY not in caplog.text
    with pytest.raises(RuntimeError, match="closed"):
        uploader.submit(read_trajectories(tmp_path / "t.jsonl")[0])


def test_nothing_is_lost_at_exit(platform: Platform, tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        from ors_gym.env import OrsEnv
        from ors_gym.platform import RolloutUploader
        from ors_gym.wrappers import RecordTrajectories
        from tests.platform.test_rollout_upload import _episode

        uploader = RolloutUploader("run-exit", max_age=3600)  # nothing is due before exit
        env = RecordTrajectories(OrsEnv(deployment={DEPLOYMENT!r}),
                                 {str(tmp_path / 't.jsonl')!r}, upload=uploader)
        for index in range(4):
            _episode(env, index % 3)
        print("episodes done", uploader.sent)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert "episodes done 0" in done.stdout  # exit came before any upload was due
    events = platform.received_events()
    assert {e.get("runName") for e in events if e["eventType"] == "rollout"} == {"run-exit"}
    assert len(events) == 4 * (1 + 6 + 1)


def test_nothing_is_lost_at_exit_when_its_first_connection_opens_then(
    platform: Platform, platform_app: tuple[Platform, str], tmp_path: Path
) -> None:
    # A host name (resolved by getaddrinfo, which asyncio sends to an executor) and no
    # connection before exit: the uploader connects while the interpreter shuts down.
    url = platform_app[1].replace("127.0.0.1", "localhost")
    script = textwrap.dedent(f"""
        from ors_gym.env import OrsEnv
        from ors_gym.platform import RolloutUploader
        from ors_gym.wrappers import RecordTrajectories
        from tests.platform.test_rollout_upload import _episode

        uploader = RolloutUploader("run-exit", base_url={url!r}, max_age=3600)
        env = RecordTrajectories(OrsEnv(env_class={ECHO!r}), {str(tmp_path / 't.jsonl')!r},
                                 upload=uploader)
        for index in range(2):
            _episode(env, index)
        print("episodes done", uploader.sent)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert "episodes done 0" in done.stdout
    assert "WARNING" not in done.stderr, done.stderr
    events = platform.received_events()
    assert sorted(e["rollout_info"]["task_index"] for e in events
                  if e["eventType"] == "rollout_update") == [0, 1]
    assert len(events) == 2 * (1 + 6 + 1)


def test_close_that_gives_up_waiting_says_how_many_rollouts_were_not_sent(
    platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    platform.hold = threading.Event()  # the platform answers no upload until set
    uploader = RolloutUploader("run-held", max_age=0.0)
    uploader.submit({"prompt": "hi", "steps": [], "index": 0})
    uploader.submit({"prompt": "hi", "steps": [], "index": 1})
    uploader.close(timeout=0.2)  # the held post cannot finish meanwhile
    assert "2 rollouts of run 'run-held' not sent (0 events sent" in caplog.text
    platform.hold.set()
    assert uploader._done.wait(30)
    assert uploader.sent == 2 * 3  # late, but sent once the platform answered


def test_a_value_json_cannot_carry_costs_only_its_rollout(
    platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    import numpy as np

    with RolloutUploader("run-np") as uploader:
        uploader.submit({"prompt": "hi", "steps": [], "index": 0},
                        metadata={"temperature": np.float32(0.5)})
        uploader.submit({"prompt": "hi", "steps": [], "index": 1},
                        metadata={"sampler": object()})
        uploader.submit({"prompt": "hi", "steps": [], "index": 2})
        assert uploader.flush(30)
    assert "3 events of a rollout of run 'run-np' not sent" in caplog.text
    assert uploader.failed == 3 and uploader.sent == 6
    events = platform.received_events()
    assert sorted(e["rollout_info"]["task_index"] for e in events
                  if e["eventType"] == "rollout_update") == [0, 2]
    assert events[0]["metadata"] == {"temperature": 0.5}


class _Poison(dict):  # type: ignore[type-arg]
    """A record whose reading raises ``SystemExit``."""

    def get(self, *args: Any) -> Any:
        raise SystemExit


def test_a_record_raising_system_exit_costs_only_its_rollout(
    platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    uploader = RolloutUploader("run-poison", max_age=0.0)
    uploader.submit(_Poison())
    uploader.submit({"prompt": "hi", "steps": [], "index": 1})
    assert uploader.flush(30)
    assert not uploader._done.is_set()  # the upload task lives on
    assert "a record of run 'run-poison' cannot be read as a rollout (SystemExit" in caplog.text
    uploader.close(timeout=30)  # returns: the uploader's loop is free to drive
    assert uploader._done.is_set()
    assert uploader.sent == 3 and uploader.dropped == 0
    assert "not sent" not in caplog.text
    events = platform.received_events()
    assert [e["rollout_info"]["task_index"] for e in events
            if e["eventType"] == "rollout_update"] == [1]


def test_a_step_does_not_raise_once_the_upload_task_has_ended(
    platform: Platform, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uploader = RolloutUploader("run-dead", max_age=0.0)
    uploader.submit({"prompt": "hi", "steps": [], "index": 0}, environment=None)
    assert uploader.flush(30) and uploader.sent == 3
    loop, task = uploader._loop, uploader._task
    assert loop is not None and task is not None
    loop.call_soon_threadsafe(task.cancel)  # the upload task ends under the uploader
    assert uploader._done.wait(30)
    with RecordTrajectories(OrsEnv(env_class=ECHO), tmp_path / "t.jsonl",
                            upload=uploader) as env:
        _episode(env)  # its last step hands the episode to the ended task
    assert uploader.flush(30)
    assert uploader.dropped == 1
    assert "the upload task has ended; a rollout of run 'run-dead' is not sent" in caplog.text
    uploader.close()
    assert "1 rollouts of run 'run-dead' not sent" in caplog.text
    assert len(platform.received_events()) == 3


def test_a_post_whose_answer_was_cut_is_not_sent_again(
    platform: Platform, platform_app: tuple[Platform, str], caplog: pytest.LogCaptureFixture
) -> None:
    with CuttingProxy(platform_app[1], cut_response_after=b"HTTP/1.1 200") as proxy:
        # The platform took the batch; its answer is cut after the headers.
        with RolloutUploader("run-cut", base_url=proxy.url, backoff=0.01) as uploader:
            uploader.submit({"prompt": "hi", "steps": [], "index": 0})
            assert uploader.flush(30)
        assert proxy.cuts_done == 1 and proxy.count(b"POST /v1/rollouts") == 1
    assert len(platform.received_events()) == 3  # logged once
    assert uploader.failed == 3 and "may have received it" in caplog.text


def test_eval_uploads_scored_episodes(
    platform: Platform, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ors_gym.cli import main

    argv = ["eval", "ors/Counter-v0", "--model", "scripted", "--episodes", "2",
            "--out", str(tmp_path / "run"), "--upload", "run-eval", "--no-progress-bar"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    events = platform.received_events()
    started = [e for e in events if e["eventType"] == "rollout"]
    assert [e["run_info"] for e in started] == [{"model_name": "scripted",
                                                 "run_type": "eval"}] * 2
    assert sorted(e["rollout_info"]["task_index"] for e in events
                  if e["eventType"] == "rollout_update") == [0, 1]
    assert f"uploaded: {len(events)} rollout events of run 'run-eval'" in out
    assert KEY not in out

    from ors_gym.eval import evaluate

    platform.clear()
    evaluate("ors/Counter-v0", "scripted", episodes=1, out=None, upload="run-py")
    assert [e["runName"] for e in platform.received_events()
            if e["eventType"] == "rollout"] == ["run-py"]  # sent before evaluate returned


def test_a_record_that_is_no_rollout_is_skipped_with_a_warning(
    platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    with RolloutUploader("run-c") as uploader:
        uploader.submit({"steps": [1]})
        uploader.submit({"prompt": "hi", "steps": [], "index": 4})
        assert uploader.flush(30)
    assert "cannot be read as a rollout" in caplog.text
    events = platform.received_events()
    assert [e["eventType"] for e in events] == ["rollout", "rollout_update", "message"]
    assert events[1]["rollout_info"] == {"task_index": 4}
