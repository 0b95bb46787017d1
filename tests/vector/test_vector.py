"""Vector envs over ORS sessions, against real SDK servers.

``OrsVectorEnv`` (one event loop, one pooled async client) and gymnasium's
``SyncVectorEnv`` / ``AsyncVectorEnv`` over ``OrsEnv`` (``make_env_fns``).
conftest.py quiets the SDK (no update check, WARNING logs) before it is imported.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
from collections.abc import Iterator
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

import ors_gym
from ors_gym.backends.http import AsyncHttpBackend, HttpBackend
from ors_gym.envs.testing.echo import Echo
from ors_gym.envs.testing.latency import Latency
from ors_gym.errors import (
    OrsActionError,
    OrsConnectionError,
    OrsError,
    OrsRequestError,
    OrsSessionExpired,
    OrsToolError,
)
from ors_gym.protocol import RunToolError, RunToolSuccess, TextBlock
from ors_gym.serving import ServerThread
from ors_gym.spaces import ToolCallSpace
from ors_gym.vector import EnvFn, OrsVectorEnv, make_env_fns
from tests._test_envs import GATE, Probe, digest

pytestmark = pytest.mark.timeout(60)

ENVS: list[type] = [Echo, Latency, Probe]


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


WAIT = call("wait")
FINISH = call("finish", reward=0.5)


def echo(text: str) -> dict[str, Any]:
    return call("echo", text=text)


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    with ServerThread(ENVS) as server:
        yield server


@pytest.fixture(scope="module")
def srv2() -> Iterator[ServerThread]:
    with ServerThread(ENVS) as server:
        yield server


@pytest.fixture
def vec_factory(srv: ServerThread) -> Iterator[Any]:
    made: list[Any] = []

    def make(num_envs: int, env_name: str = "echo", **kwargs: Any) -> OrsVectorEnv:
        kwargs.setdefault("base_url", srv.url)
        env = OrsVectorEnv(num_envs, env_name=env_name, **kwargs)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def live(server: ServerThread) -> set[str]:
    return set(server.sdk_server._active_envs)


def texts(obs: dict[str, Any]) -> list[str]:
    return list(obs["text"])


# -- registration and construction -----------------------------------------------------------


def test_make_vec_uses_the_vector_entry_point(srv: ServerThread) -> None:
    env = gym.make_vec("ors/Latency-v0", num_envs=4, vectorization_mode="vector_entry_point")
    try:
        assert isinstance(env, OrsVectorEnv) and env.num_envs == 4
        assert env.servers == ("in-process",)
        assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert env.spec is not None and env.spec.id == "ors/Latency-v0"
        assert isinstance(env.single_action_space, ToolCallSpace)
        assert isinstance(env.action_space, gym.spaces.Tuple) and len(env.action_space) == 4
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        obs, rewards, terminated, truncated, info = env.step((WAIT,) * 4)
        assert texts(obs) == ["waited 1"] * 4
        assert rewards.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
        assert info["calls"].dtype == object and info["_calls"].all()
        assert info["calls"][2][0]["name"] == "wait" and info["calls"][2][0]["ok"]
    finally:
        env.close()

    # A bundled id served by a server: base_url wins, env_class only names the env.
    remote = gym.make_vec("ors/Latency-v0", num_envs=2, vectorization_mode="vector_entry_point",
                          base_url=srv.url)
    try:
        assert isinstance(remote, OrsVectorEnv) and remote.servers == (srv.url,)
        remote.reset(seed=0)
        assert set(remote.session_ids) <= live(srv)
        assert remote.unwrapped.settings.max_steps == 1000  # the spec's step limit arrived
    finally:
        remote.close()


def test_secrets_reach_the_server_and_stay_out_of_specs(srv: ServerThread) -> None:
    api_key, secret = "sk-KEY-31337", "hunter2-SECRET-value"
    env = gym.make_vec("ors/Remote-v0", num_envs=2, vectorization_mode="vector_entry_point",
                       base_url=srv.url, env_name="probe", api_key=api_key,
                       secrets={"TOKEN": secret})
    try:
        env.reset(seed=0)
        obs, *_ = env.step((call("secret_digest", name="TOKEN"),) * 2)
        assert texts(obs) == [digest(secret)] * 2
        assert env.spec is not None
        shown = f"{env!r} {env.spec!r} {env.spec.kwargs}"
        assert secret not in shown and api_key not in shown
    finally:
        env.close()


def test_bad_arguments_are_clear(srv: ServerThread) -> None:
    with pytest.raises(ValueError, match="needs an environment"):
        OrsVectorEnv(2)
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        OrsVectorEnv(0, base_url=srv.url)
    with pytest.raises(ValueError, match="autoreset_mode='sometimes'; choose one of"):
        OrsVectorEnv(2, base_url=srv.url, autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="render_mode='human'; choose one of"):
        OrsVectorEnv(2, base_url=srv.url, render_mode="human")
    with pytest.raises(ValueError, match="no_tool_call"):
        OrsVectorEnv(2, base_url=srv.url, no_tool_call="shrug")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="base_url must be a server URL or a non-empty list"):
        OrsVectorEnv(2, base_url=[])
    with pytest.raises(OrsRequestError, match="unknown environment 'nosuch'"):
        OrsVectorEnv(2, base_url=srv.url, env_name="nosuch")
    with socket.create_server(("127.0.0.1", 0)) as sock:
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(OrsConnectionError, match="cannot reach the ORS server"):
        OrsVectorEnv(2, base_url=dead, backend_options={"max_retries": 0})


def test_bad_actions_and_call_order(vec_factory: Any) -> None:
    env = vec_factory(3)
    with pytest.raises(RuntimeError, match="no open session; call reset"):
        env.step((echo("a"),) * 3)
    env.reset(seed=0)
    with pytest.raises(TypeError, match="sequence of 3 actions"):
        env.step(echo("a"))
    with pytest.raises(ValueError, match="expected 3 actions"):
        env.step((echo("a"),) * 2)
    with pytest.raises(OrsActionError) as err:
        env.step((echo("a"), 42, echo("c")))
    assert "sub-env 1" in "".join(err.value.__notes__)
    with pytest.raises(RuntimeError, match="no sub-env in flight"):
        env.recv()
    with pytest.raises(ValueError, match="out of range"):
        env.send((echo("a"),), env_ids=[3])
    env.send((echo("a"),), env_ids=[1])
    with pytest.raises(RuntimeError, match=r"sub-envs \[1\] are still in flight"):
        env.send((echo("b"),), env_ids=[1])
    with pytest.raises(RuntimeError, match="in flight after send"):
        env.step((echo("a"),) * 3)
    obs, *_ , info = env.recv()
    assert texts(obs) == ["a"] and list(info["env_id"]) == [1]
    # nothing stepped by the refused calls: every sub-env is at its first step
    _, _, _, _, info = env.step((echo("x"),) * 3)
    assert [c[0]["input"] for c in info["calls"]] == [{"text": "x"}] * 3


# -- the same results as gymnasium's vector envs over OrsEnv -----------------------------------


def _comparable(info: dict[str, Any]) -> dict[str, Any]:
    """Info without the values that differ between runs (session ids)."""
    return {k: v for k, v in info.items() if k not in ("session_id", "blocks")}


def _untimed(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "seconds"} for c in calls]


def test_matches_sync_vector_env_over_ors_env(srv: ServerThread, vec_factory: Any) -> None:
    n = 3
    ours = vec_factory(n)
    theirs = SyncVectorEnv(make_env_fns("ors/Remote-v0", n, base_url=srv.url, env_name="echo"))
    try:
        obs_a, info_a = ours.reset(seed=11)
        obs_b, info_b = theirs.reset(seed=11)
        assert obs_a == obs_b  # same tasks drawn with seed + i
        assert list(info_a["index"]) == list(info_b["index"])
        assert info_a.keys() == info_b.keys()
        np.testing.assert_array_equal(info_a["_session_id"], info_b["_session_id"])
        actions = (echo("hi"), "no tool call here", call("echo", text=3))
        for _ in range(2):
            a = ours.step(actions)
            b = theirs.step(actions)
            assert a[0] == b[0]
            for x, y in zip(a[1:4], b[1:4], strict=True):
                np.testing.assert_array_equal(x, y)
            assert a[4].keys() == b[4].keys()
            for key in _comparable(a[4]):
                if key == "calls":  # timings aside, the same records
                    assert [_untimed(c) for c in a[4][key]] == [_untimed(c) for c in b[4][key]]
                else:
                    np.testing.assert_array_equal(a[4][key], b[4][key])
        assert texts(a[0])[1].startswith("No tool was called")
        assert a[4]["error_reason"][2] == "input_validation"
    finally:
        theirs.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_autoreset_matches_gymnasium(srv: ServerThread, vec_factory: Any,
                                     mode: AutoresetMode) -> None:
    n = 2
    ours = vec_factory(n, autoreset_mode=mode)
    theirs = SyncVectorEnv(make_env_fns("ors/Remote-v0", n, base_url=srv.url, env_name="echo"),
                           autoreset_mode=mode)
    try:
        for env in (ours, theirs):
            assert env.metadata["autoreset_mode"] is mode
        results = []
        for env in (ours, theirs):
            env.reset(seed=5)
            first_sid = env.unwrapped.session_ids[0] if env is ours else None
            steps = [env.step((FINISH, echo("a"))), env.step((echo("b"), echo("c")))]
            results.append(steps)
            if env is ours:
                assert ours.session_ids[0] != first_sid  # a new session for the new episode
        for step_a, step_b in zip(*results, strict=True):
            assert step_a[0] == step_b[0]
            for x, y in zip(step_a[1:4], step_b[1:4], strict=True):
                np.testing.assert_array_equal(x, y)
            assert step_a[4].keys() == step_b[4].keys()
        (finish, after) = results[0]
        assert list(finish[1]) == [0.5, 0.0] and list(finish[2]) == [True, False]
        if mode is AutoresetMode.NEXT_STEP:
            # the next step resets sub-env 0 and ignores its action
            assert texts(after[0])[0].startswith("Echo test bench")
            assert after[1][0] == 0.0 and not after[2][0] and after[4]["_session_id"][0]
            assert texts(after[0])[1] == "c"
        else:
            # the finishing step already shows the next episode; the last one is in final_obs
            assert texts(finish[0])[0].startswith("Echo test bench")
            assert list(finish[4]["_final_obs"]) == [True, False]
            assert finish[4]["final_obs"][0] == {"text": "Finished with reward 0.5.", "images": ()}
            assert finish[4]["final_info"]["calls"][0][0]["name"] == "finish"
            assert texts(after[0]) == ["b", "c"]
    finally:
        theirs.close()


def test_disabled_autoreset_and_reset_mask(vec_factory: Any) -> None:
    env = vec_factory(3, autoreset_mode="Disabled")
    obs, _ = env.reset(seed=0)
    env.step((FINISH, echo("1"), echo("1")))
    with pytest.raises(RuntimeError, match="sub-env 0 ended and autoreset_mode is DISABLED"):
        env.step((echo("x"),) * 3)
    sids = env.session_ids
    mask = np.array([True, False, False])
    obs, info = env.reset(options={"reset_mask": mask, "index": 2})
    assert list(info["_index"]) == [True, False, False] and info["index"][0] == 2
    assert env.session_ids[0] != sids[0] and env.session_ids[1:] == sids[1:]
    assert texts(obs)[0].startswith("Echo test bench (echo task 2)")
    assert texts(obs)[1:] == ["1", "1"]  # the others keep their last observation
    obs, *_ = env.step((echo("x"), echo("y"), echo("z")))
    assert texts(obs) == ["x", "y", "z"]


def test_per_env_seeds_and_options(srv: ServerThread, vec_factory: Any) -> None:
    env = vec_factory(3)
    _, info = env.reset(seed=40)
    singles = []
    for i in range(3):
        single = ors_gym.OrsEnv(base_url=srv.url, env_name="echo")
        singles.append(single.reset(seed=40 + i)[1]["index"])
        single.close()
    assert list(info["index"]) == singles  # sub-env i is seeded with seed + i

    obs, info = env.reset(options=[{"index": 2}, None, {"task_spec": {"note": "mine"}}])
    assert info["index"][0] == 2 and info["split"][0] == "train"
    assert texts(obs)[2] == (
        "Echo test bench (mine): echo, slow_count, count, fail, image, finish."
    )
    assert info["task_spec"]["note"][2] == "mine" and info["index"][2] is None

    obs, _ = env.reset(options={"index": 1})  # one dict: every sub-env
    assert all("echo task 1" in t for t in texts(obs))
    with pytest.raises(ValueError, match="sub-env 1: unknown reset option"):
        env.reset(options=[None, {"colour": "red"}, None])
    with pytest.raises(ValueError, match="needs 3 entries"):
        env.reset(options=[None])
    with pytest.raises(ValueError, match="needs 3 seeds"):
        env.reset(seed=[1, 2])


# -- uneven latency: send / recv ----------------------------------------------------------------


def test_recv_returns_the_fast_sub_envs_while_a_slow_one_runs(vec_factory: Any) -> None:
    env = vec_factory(4, env_name="probe")
    env.reset(seed=0)
    fast = call("secret_digest", name="X")
    GATE.clear()
    try:
        env.send((call("wait_gate"), fast, fast, fast))
        obs, rewards, _, _, info = env.recv(min_envs=3)
        assert sorted(info["env_id"]) == [1, 2, 3]  # sub-env 0 cannot finish: its gate is shut
        assert texts(obs) == ["missing"] * 3 and rewards.shape == (3,)
        assert env.in_flight == (0,)
        for _ in range(3):  # the fast ones go on stepping while sub-env 0 waits
            env.send((fast, fast, fast), env_ids=[1, 2, 3])
            _, _, _, _, info = env.recv(min_envs=3)
            assert sorted(info["env_id"]) == [1, 2, 3]
        GATE.set()
        obs, _, _, _, info = env.recv()
        assert list(info["env_id"]) == [0] and texts(obs) == ["released"]
        assert info["calls"][0][0]["name"] == "wait_gate"
    finally:
        GATE.set()
    obs, *_ = env.step((fast,) * 4)  # all back in step
    assert texts(obs) == ["missing"] * 4


def test_recv_timeout_loses_nothing(vec_factory: Any) -> None:
    env = vec_factory(3, env_name="probe")
    env.reset(seed=0)
    fast = call("secret_digest", name="X")
    GATE.clear()
    try:
        env.send((call("wait_gate"), fast, fast))
        _, _, _, _, info = env.recv(min_envs=2)  # the two fast ones
        assert sorted(info["env_id"]) == [1, 2]
        env.send((fast, fast), env_ids=[1, 2])
        with pytest.raises(TimeoutError, match="still in flight"):
            env.recv(min_envs=3, timeout=0.5)  # sub-env 0 is held at its gate
        assert env.in_flight == (0, 1, 2)  # nothing taken by the timed-out recv
        GATE.set()
        _, _, _, _, info = env.recv(min_envs=3, timeout=30)
        assert sorted(info["env_id"]) == [0, 1, 2]
        assert env.in_flight == ()
    finally:
        GATE.set()


def test_render_frames_tiles_and_text() -> None:
    from ors_gym.envs.gridworld import GridWorld

    moves = [{"tool_calls": [{"name": "move", "arguments": {"direction": "right"}}]}] * 4
    for mode in ("rgb_array", "rgb_array_tiled", "ansi"):
        env = OrsVectorEnv(4, env_class=GridWorld, render_mode=mode)
        try:
            env.reset(seed=0)
            env.step(moves)
            out = env.render()
            if mode == "rgb_array":
                assert len(out) == 4 and all(f.ndim == 3 and f.dtype == np.uint8 for f in out)
                frames = out
            elif mode == "rgb_array_tiled":
                h, w = frames[0].shape[:2]
                assert out.shape == (2 * h, 2 * w, 3)  # 4 frames in a 2x2 grid
                assert np.array_equal(out[h:, w:], frames[3])  # the last is bottom right
            else:
                assert len(out) == 4 and all("goal" in text for text in out)
        finally:
            env.close()


def test_reset_leaves_a_handed_out_action_space_alone() -> None:
    from ors_gym.envs.toolbox import Toolbox

    env = OrsVectorEnv(2, env_class=Toolbox)
    try:
        before = env.action_space
        shared = [{t.name for t in space.tools} for space in before]
        _, infos = env.reset(options={"index": 0})
        after = env.action_space
        assert after is not before
        assert [{t.name for t in space.tools} for space in before] == shared
        task_tools = {t["name"] for t in infos["tools"][0]}
        assert [{t.name for t in space.tools} for space in after] == [task_tools] * 2
        assert task_tools != shared[0]
    finally:
        env.close()


def test_send_recv_with_uneven_latency_tasks(vec_factory: Any) -> None:
    env = vec_factory(3, env_name="latency")
    env.reset(options=[{"task_spec": {"delay_ms": ms}} for ms in (0, 0, 30_000)])
    env.send((WAIT,) * 3)
    _, _, _, _, info = env.recv(min_envs=2, max_envs=2)
    assert sorted(info["env_id"]) == [0, 1]
    env.reset()  # cancels sub-env 2's call in flight
    assert env.in_flight == ()
    obs, *_ = env.step((WAIT,) * 3)
    assert texts(obs) == ["waited 1"] * 3


# -- scale-out ---------------------------------------------------------------------------------


def test_sessions_spread_over_two_servers(srv: ServerThread, srv2: ServerThread) -> None:
    env = OrsVectorEnv(4, base_url=[srv.url, srv2.url], env_name="echo")
    try:
        assert env.servers == (srv.url, srv2.url)
        assert env.sub_env_servers == (srv.url, srv2.url, srv.url, srv2.url)
        env.reset(seed=0)
        sids = env.session_ids
        assert {sids[0], sids[2]} <= live(srv) and {sids[1], sids[3]} <= live(srv2)
        assert not {sids[1], sids[3]} & live(srv)
        obs, *_ = env.step([echo(str(i)) for i in range(4)])
        assert texts(obs) == ["0", "1", "2", "3"]
    finally:
        env.close()
    assert not set(sids) & (live(srv) | live(srv2))  # close() deleted them on both servers


# -- failures ----------------------------------------------------------------------------------


def test_one_lost_session_truncates_only_its_sub_env(srv: ServerThread, vec_factory: Any) -> None:
    env = vec_factory(3)
    env.reset(seed=0)
    lost = env.session_ids[1]
    with HttpBackend(srv.url, keepalive_interval=None) as other:
        other.delete_session(lost)  # behind the env's back
    obs, _, terminated, truncated, info = env.step((echo("a"), echo("b"), echo("c")))
    assert list(truncated) == [False, True, False] and not terminated.any()
    assert list(info["_error"]) == [False, True, False]
    assert lost in info["error"][1] and "gone on the server" in info["error"][1]
    assert info["truncation_reason"][1] == "session_lost"
    assert texts(obs)[0] == "a" and texts(obs)[2] == "c"
    assert texts(obs)[1].startswith("The episode ended:")
    obs, _, _, truncated, info = env.step((echo("d"), echo("ignored"), echo("f")))
    assert texts(obs)[0] == "d" and texts(obs)[2] == "f"
    assert texts(obs)[1].startswith("Echo test bench")  # autoreset: a fresh session
    assert env.session_ids[1] not in (None, lost) and not truncated.any()


def test_tool_exception_truncates_and_on_error_raise_raises(vec_factory: Any) -> None:
    env = vec_factory(2)
    env.reset(seed=0)
    _, _, _, truncated, info = env.step((call("fail", message="kaboom-77"), echo("ok")))
    assert list(truncated) == [True, False]
    assert "kaboom-77" in info["error"][0] and info["truncation_reason"][0] == "server_error"

    strict = vec_factory(2, on_error="raise")
    strict.reset(seed=0)
    with pytest.raises(OrsToolError, match="kaboom-78") as err:
        strict.step((echo("ok"), call("fail", message="kaboom-78")))
    assert "sub-env 1" in "".join(err.value.__notes__)


def test_every_session_failing_raises(srv: ServerThread, vec_factory: Any) -> None:
    env = vec_factory(2)
    env.reset(seed=0)
    with HttpBackend(srv.url, keepalive_interval=None) as other:
        for sid in env.session_ids:
            other.delete_session(sid)
    with pytest.raises(OrsError, match="every sub-env failed in the same step") as err:
        env.step((echo("a"), echo("b")))
    assert isinstance(err.value.__cause__, OrsSessionExpired)
    obs, _ = env.reset()  # the env recovers with new sessions
    assert all(t.startswith("Echo test bench") for t in texts(obs))


def test_a_dead_server_among_two_truncates_only_its_sub_envs(srv: ServerThread) -> None:
    doomed = ServerThread(ENVS).start()
    env = OrsVectorEnv(4, base_url=[srv.url, doomed.url], env_name="echo",
                       backend_options={"max_retries": 1, "backoff": 0.01})
    try:
        env.reset(seed=0)
        doomed.stop()
        _, _, _, truncated, info = env.step((echo("a"),) * 4)
        assert list(truncated) == [False, True, False, True]
        assert list(info["error_reason"][[1, 3]]) == ["server_unreachable"] * 2
        assert doomed.url in info["error"][1]
    finally:
        doomed.stop()
        env.close()  # sessions on the live server are still deleted


def test_the_only_server_dying_raises_a_clear_error() -> None:
    doomed = ServerThread(ENVS).start()
    env = OrsVectorEnv(2, base_url=doomed.url, env_name="echo",
                       backend_options={"max_retries": 1, "backoff": 0.01})
    try:
        env.reset(seed=0)
        doomed.stop()
        with pytest.raises(OrsConnectionError, match="stopped answering") as err:
            env.step((echo("a"),) * 2)
        message = str(err.value)
        assert doomed.url in message and "(0, 1)" in message and "call reset()" in message
    finally:
        doomed.stop()
        env.close()


def test_close_deletes_every_session(srv: ServerThread) -> None:
    env = OrsVectorEnv(5, base_url=srv.url, env_name="echo")
    env.reset(seed=0)
    env.step((echo("a"),) * 5)
    env.send((call("slow_count", token="close-test", seconds=5),) * 2, env_ids=[0, 1])
    sids = set(env.session_ids)
    assert len(sids) == 5 and sids <= live(srv)
    env.close()
    assert not sids & live(srv)
    env.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


# -- in-process sub-envs -------------------------------------------------------------------------


def test_in_process_sub_envs_step_concurrently() -> None:
    env = OrsVectorEnv(3, env_class=Probe)
    try:
        env.reset(seed=0)
        GATE.clear()
        env.send((call("wait_gate"), call("secret_digest", name="X"),
                  call("secret_digest", name="Y")))
        _, _, _, _, info = env.recv(min_envs=2)
        assert sorted(info["env_id"]) == [1, 2]  # one blocked call does not hold the others
        GATE.set()
        obs, *_ = env.recv()
        assert texts(obs) == ["released"]
    finally:
        GATE.set()
        env.close()


# -- gymnasium's AsyncVectorEnv over OrsEnv ---------------------------------------------------


@pytest.mark.parametrize(
    ("context", "mode"),
    [("fork", AutoresetMode.NEXT_STEP), ("spawn", AutoresetMode.SAME_STEP)],
)
def test_async_vector_env_over_ors_env(srv: ServerThread, context: str,
                                       mode: AutoresetMode) -> None:
    fns = make_env_fns("ors/Remote-v0", 2, base_url=srv.url, env_name="echo")
    env = AsyncVectorEnv(fns, context=context, shared_memory=False, autoreset_mode=mode)
    try:
        obs, info = env.reset(seed=3)
        sids = set(info["session_id"])
        assert sids <= live(srv)  # sessions opened in the workers
        obs, _, terminated, _, info = env.step((FINISH, echo("w")))
        assert list(terminated) == [True, False] and texts(obs)[1] == "w"
        if mode is AutoresetMode.SAME_STEP:
            assert info["_final_obs"][0] and texts(obs)[0].startswith("Echo test bench")
        else:
            obs, *_ = env.step((echo("ignored"), echo("v")))
            assert texts(obs)[0].startswith("Echo test bench") and texts(obs)[1] == "v"
    finally:
        env.close()
    assert not sids & live(srv)


def test_async_vector_env_shared_memory_as_far_as_spaces_allow(srv: ServerThread) -> None:
    fns = make_env_fns("ors/Remote-v0", 2, base_url=srv.url, env_name="echo")
    with pytest.raises((TypeError, ValueError), match="disable `shared_memory`"):
        AsyncVectorEnv(fns, shared_memory=True)  # text and image tuples: no fixed buffer
    from ors_gym.wrappers import TextVector

    boxed = make_env_fns("ors/Remote-v0", 2, base_url=srv.url, env_name="echo",
                         wrappers=[partial(TextVector, dim=16)])
    env = AsyncVectorEnv(boxed, shared_memory=True)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2, 16) and obs.dtype == np.float32
        first = obs.copy()
        obs, *_ = env.step((echo("a b"), echo("a b")))
        assert np.array_equal(obs[0], obs[1]) and not np.array_equal(obs[0], first[0])
    finally:
        env.close()


def test_env_fns_pickle_with_their_spec(srv: ServerThread) -> None:
    ids = ors_gym.register_server(srv.url)
    fn = make_env_fns("ors-remote/probe-v0", 1)[0]
    assert "ors-remote/probe-v0" in ids and isinstance(fn, EnvFn)
    copy = pickle.loads(pickle.dumps(fn))
    assert copy.spec == fn.spec  # a worker needs no registry: the spec travels
    env = copy()
    try:
        assert env.unwrapped.env_name == "probe"
    finally:
        env.close()
    with pytest.raises(ValueError, match="num_envs"):
        make_env_fns("ors/Echo-v0", 0)


# -- the async backend ---------------------------------------------------------------------------


def test_async_backend_matches_the_sync_one(srv: ServerThread) -> None:
    sync = HttpBackend(srv.url, keepalive_interval=None)

    async def main() -> None:
        async with AsyncHttpBackend(srv.url, max_retries=1, backoff=0.01) as backend:
            assert await backend.health() == sync.health()
            assert await backend.tools("echo") == sync.tools("echo")
            assert await backend.splits("echo") == sync.splits("echo")
            assert await backend.tasks("echo", "train") == sync.tasks("echo", "train")
            sid = await backend.create_session("echo", split="train", index=1)
            assert await backend.prompt("echo", sid) == sync.prompt("echo", sid)
            text = "x" * 9000 + " " * 4100  # several SSE chunks, some starting with spaces
            result = await backend.call("echo", sid, "echo", {"text": text})
            assert result == sync.call("echo", sid, "echo", {"text": text})
            assert isinstance(result, RunToolSuccess)
            assert result.output.blocks == [TextBlock(text=text)]
            missing = await backend.call("echo", sid, "nosuch", {})
            assert isinstance(missing, RunToolError) and missing.reason == "not_found"
            with pytest.raises(OrsToolError, match="kaboom-9"):
                await backend.call("echo", sid, "fail", {"message": "kaboom-9"})
            with pytest.raises(OrsRequestError, match="unknown environment"):
                await backend.tools("nosuch")
            other = await backend.create_session("echo", split="train", index=0)
            await backend.delete_session(other)
            with pytest.raises(OrsSessionExpired):
                await backend.call("echo", other, "echo", {"text": "x"})
            assert backend.open_sessions == {sid}
            copy = pickle.loads(pickle.dumps(backend))
            assert copy.open_sessions == frozenset() and await copy.health() == {"status": "ok"}
            await copy.aclose()
        assert sid not in live(srv)  # aclose deleted it

    try:
        asyncio.run(main())
    finally:
        sync.close()


# -- the sans-IO wire pieces both HTTP transports use --------------------------------------------


def test_body_decoder_caps_while_inflating() -> None:
    import gzip
    import zlib

    from ors_gym.backends.http._codec import BodyDecoder, Where
    from ors_gym.errors import OrsProtocolError

    where = Where(server="http://x")
    small = gzip.compress(b"hello " * 10)
    assert BodyDecoder("gzip", max_bytes=100, what="t", where=where).feed(small) == b"hello " * 10
    deflated = zlib.compress(b"abc")
    assert BodyDecoder("deflate", max_bytes=100, what="t", where=where).feed(deflated) == b"abc"
    bomb = gzip.compress(b"\0" * 20_000_000)
    assert len(bomb) < 100_000
    decoder = BodyDecoder("gzip", max_bytes=1000, what="t", where=where)
    with pytest.raises(OrsProtocolError, match="max_response_bytes=1000"):
        decoder.feed(bomb)
    assert decoder.size <= 1001  # refused while inflating, not after
    with pytest.raises(OrsProtocolError, match="gzip encoding is corrupt"):
        BodyDecoder("gzip", max_bytes=100, what="t", where=where).feed(b"not gzip at all")
    with pytest.raises(OrsProtocolError, match="did not ask for"):
        BodyDecoder("br", max_bytes=100, what="t", where=where)


def test_async_backend_meets_hostile_answers() -> None:
    import gzip as gz

    from openreward.environments import Server

    from ors_gym.errors import OrsProtocolError, OrsTimeoutError
    from ors_gym.serving import load_environment_classes
    from tests._fault_servers import FaultyApp, UvicornThread
    from tests._hostile import HostileServer, answer, redirect_to, streamed

    ack = b"event: task_id\r\ndata: 0123abcd\r\n\r\n"
    elsewhere = FaultyApp(Server(load_environment_classes([Echo])).app)
    with HostileServer([Echo]) as hs, UvicornThread(elsewhere) as other:

        async def main() -> None:
            backend = AsyncHttpBackend(hs.url, api_key="sk-KEY-9", max_retries=0,
                                       call_timeout=1.0, max_response_bytes=100_000)
            async with backend:
                sid = await backend.create_session("echo", split="train", index=0)
                bomb = gz.compress(ack + b"event: chunk\r\ndata: " + b"z" * 5_000_000)
                hs.app.plan("/echo/call", answer(200, bomb, "text/event-stream",
                                                 {"content-encoding": "gzip"}))
                with pytest.raises(OrsProtocolError, match="max_response_bytes=100000"):
                    await backend.call("echo", sid, "echo", {"text": "x"})
                hs.app.plan("/echo/call", streamed(ack, b": ping\r\n\r\n", interval=0.05))
                with pytest.raises(OrsTimeoutError, match=r"call_timeout=1\.0"):
                    await backend.call("echo", sid, "echo", {"text": "x"})
                hs.app.plan("/echo/tools", redirect_to(other.url), times=None)
                listed = await backend.tools("echo")  # answered by the other server
                assert {"echo", "finish"} <= {t.name for t in listed.tools}
            assert elsewhere.requests  # the redirect was followed, without the credentials
            assert not any("x-api-key" in headers for _, headers in elsewhere.requests)

        asyncio.run(main())


def test_a_hanging_server_is_probed_with_back_off() -> None:
    """A server that accepts connections and never answers costs a probe's timeout only
    after each back-off, not every batch: meanwhile its last failure stands."""
    from ors_gym.vector._health import PROBE_BACKOFF_S, ServerHealth

    class QuickProbe(AsyncHttpBackend):
        """The real backend whose probe gives up sooner: the hang, not its length, is the
        point here."""

        async def probe(self, timeout: float = 0.2) -> None:
            await super().probe(timeout)

    now = [0.0]
    with socket.create_server(("127.0.0.1", 0)) as listener:  # accepts, never answers
        backend = QuickProbe(f"http://127.0.0.1:{listener.getsockname()[1]}")
        health = ServerHealth([backend], clock=lambda: now[0])

        async def probes() -> None:
            first = await health.probe(backend)  # waits for the probe's timeout
            assert first is not None and backend in health.down
            assert await health.probe(backend) is first  # backing off: not probed again
            now[0] += PROBE_BACKOFF_S
            second = await health.probe(backend)  # the back-off is over: probed again
            assert second is not None and second is not first
            now[0] += PROBE_BACKOFF_S
            assert await health.probe(backend) is second  # the wait doubled
            await backend.aclose()

        asyncio.run(probes())
