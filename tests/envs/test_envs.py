"""The bundled environments, served by one real SDK server and driven over HTTP + SSE.

Requests are plain httpx; ``_call`` POSTs ``/{env}/call`` and joins the SSE
``chunk``/``end`` data exactly as the protocol says. Where a check is simpler
in-process, the classes are instantiated directly.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from PIL import Image

from ors_gym.envs import BUNDLED, DEFAULT_ENV
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.serving import ServerThread

ALL_ENVS = [
    BUNDLED[DEFAULT_ENV], *(s for n, s in BUNDLED.items() if n != DEFAULT_ENV), *TEST_ENVS.values()
]
EXPECTED_TOOLS = {
    "gridworld": {"move"},
    "math": {"submit"},
    "qa": {"hint"},
    "counter": {"increment", "decrement"},
    "toolbox": {"submit", "configure"},
    "echo": {"echo", "slow_count", "count", "fail", "image", "finish"},
    "latency": {"wait"},
    "sandbox": {
        "submit", "bash", "glob", "grep", "ls", "read", "write", "edit", "multi_edit",
        "todo_write",
    },
}
EXPECTED_SPLITS = {
    "gridworld": {"train": 64, "test": 16},
    "math": {"train": 1000, "test": 200},
    "qa": {"train": 20, "test": 10},
    "counter": {"train": 50, "test": 10},
    "toolbox": {"train": 30, "test": 10},
    "echo": {"train": 3},
    "latency": {"train": 4},
    "sandbox": {"train": 8, "test": 4},
}


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """An httpx client on one real server hosting every bundled environment and the test ones."""
    with ServerThread(ALL_ENVS) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        yield c


# --- helpers -----------------------------------------------------------------------------


@contextmanager
def _session(
    client: httpx.Client,
    env: str,
    *,
    split: str = "train",
    index: int = 0,
    task_spec: dict[str, Any] | None = None,
) -> Iterator[str]:
    """Create a session on ``env`` (by split/index or task spec); delete it afterwards."""
    sid = uuid.uuid4().hex
    body: dict[str, Any] = {"env_name": env}
    body.update(
        {"task_spec": task_spec} if task_spec is not None else {"split": split, "index": index}
    )
    r = client.post("/create", json=body, headers={"X-Session-ID": sid})
    assert r.status_code == 200, r.text
    try:
        yield sid
    finally:
        client.post("/delete", headers={"X-Session-ID": sid})


def _events(
    client: httpx.Client, env: str, sid: str, name: str, args: dict[str, Any]
) -> list[tuple[str, str]]:
    """POST /{env}/call; every SSE event as (event, data)."""
    body = {"name": name, "input": args, "task_id": None}
    with connect_sse(
        client, "POST", f"/{env}/call", json=body, headers={"X-Session-ID": sid}
    ) as source:
        return [(e.event, e.data) for e in source.iter_sse()]


def _join(events: list[tuple[str, str]]) -> dict[str, Any]:
    """Join chunk + end data and parse the RunToolOutput JSON."""
    kinds = [k for k, _ in events]
    assert "error" not in kinds, events
    assert kinds[0] == "task_id" and kinds[-1] == "end", kinds
    result: dict[str, Any] = json.loads("".join(d for k, d in events if k in ("chunk", "end")))
    return result


def _call(
    client: httpx.Client, env: str, sid: str, name: str, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    return _join(_events(client, env, sid, name, args or {}))


def _output(
    client: httpx.Client, env: str, sid: str, name: str, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ToolOutput of a successful call."""
    result = _call(client, env, sid, name, args)
    assert result["ok"] is True, result
    output: dict[str, Any] = result["output"]
    return output


def _task(client: httpx.Client, env: str, split: str, index: int) -> dict[str, Any]:
    r = client.post(f"/{env}/task", json={"split": split, "index": index})
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()["task"]
    return task


def _decode_png(block: dict[str, Any]) -> Image.Image:
    assert block["type"] == "image" and block["mimeType"] == "image/png"
    image = Image.open(io.BytesIO(base64.b64decode(block["data"])))
    image.load()
    return image


# --- discovery ---------------------------------------------------------------------------


def test_every_bundled_env_is_served_default_first(client: httpx.Client) -> None:
    names = client.get("/list_environments").json()
    assert names == [spec.rsplit(":", 1)[1].lower() for spec in ALL_ENVS]
    assert names[0] == DEFAULT_ENV.lower()


@pytest.mark.parametrize("env", sorted(EXPECTED_TOOLS))
def test_tools_are_listed_with_descriptions(client: httpx.Client, env: str) -> None:
    listed = client.get(f"/{env}/tools").json()
    assert {t["name"] for t in listed["tools"]} == EXPECTED_TOOLS[env]
    assert all(t["description"] for t in listed["tools"])


@pytest.mark.parametrize("env", sorted(EXPECTED_SPLITS))
def test_splits_and_task_counts(client: httpx.Client, env: str) -> None:
    splits = client.get(f"/{env}/splits").json()
    assert {s["name"] for s in splits} == set(EXPECTED_SPLITS[env])
    for split, size in EXPECTED_SPLITS[env].items():
        assert client.post(f"/{env}/num_tasks", json={"split": split}).json() == {"num_tasks": size}
        if env == "math":
            continue
        tasks = client.post(f"/{env}/tasks", json={"split": split}).json()["tasks"]
        assert len(tasks) == size
        assert len({json.dumps(t, sort_keys=True) for t in tasks}) == size  # ids are unique


def test_unknown_split_is_rejected(client: httpx.Client) -> None:
    r = client.post("/gridworld/tasks", json={"split": "validation"})
    assert r.status_code == 400


def test_math_is_index_only(client: httpx.Client) -> None:
    r = client.post("/math/tasks", json={"split": "train"})
    assert r.status_code == 400
    assert "index" in r.json()["detail"]
    task = _task(client, "math", "train", 5)
    assert task["id"] == "train-5"
    assert isinstance(task["question"], str) and isinstance(task["answer"], int)
    assert _task(client, "math", "train", -1) == _task(client, "math", "train", 999)
    assert _task(client, "math", "test", -200) == _task(client, "math", "test", 0)
    for bad in (1000, -1001):
        assert client.post("/math/task", json={"split": "train", "index": bad}).status_code == 400
    r = client.post("/math/task_range", json={"split": "test", "start": 198, "stop": 205})
    assert [t["id"] for t in r.json()["tasks"]] == ["test-198", "test-199"]


def test_math_index_errors_in_process() -> None:
    from ors_gym.envs.math import Math

    with pytest.raises(IndexError, match="out of range"):
        asyncio.run(Math.get_task("test", 200))
    with pytest.raises(ValueError, match="no split 'dev'"):
        asyncio.run(Math.num_tasks("dev"))
    with pytest.raises(NotImplementedError):
        Math.list_tasks("train")


# --- determinism -------------------------------------------------------------------------


def test_same_index_gives_same_task(client: httpx.Client) -> None:
    from ors_gym.envs.gridworld import GridWorld
    from ors_gym.envs.math import Math

    for env, split in [("math", "train"), ("gridworld", "test"), ("counter", "train")]:
        assert _task(client, env, split, 3) == _task(client, env, split, 3)
    assert asyncio.run(Math.get_task("train", 42)) == _task(client, "math", "train", 42)
    assert GridWorld.list_tasks("train") == GridWorld.list_tasks("train")
    math_tasks = [_task(client, "math", "train", i)["question"] for i in range(20)]
    assert len(set(math_tasks)) > 10  # generated, not one task repeated


def test_tasks_do_not_depend_on_hash_seed() -> None:
    """Another interpreter, with another PYTHONHASHSEED, generates the same tasks."""
    from ors_gym.envs.gridworld import GridWorld
    from ors_gym.envs.math import Math

    code = (
        "import asyncio, json; from ors_gym.envs.math import Math; "
        "from ors_gym.envs.gridworld import GridWorld; "
        "print(json.dumps([asyncio.run(Math.get_task('test', 7)), GridWorld.list_tasks('test')]))"
    )
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    here = [asyncio.run(Math.get_task("test", 7)), GridWorld.list_tasks("test")]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == here


# --- Math, QA, Counter -------------------------------------------------------------------


def test_math_submit_rewards_correct_answer_and_ends(client: httpx.Client) -> None:
    task = _task(client, "math", "train", 11)
    with _session(client, "math", index=11) as sid:
        prompt = client.get("/math/prompt", headers={"X-Session-ID": sid}).json()
        assert task["question"] in prompt[0]["text"]
        out = _output(client, "math", sid, "submit", {"answer": task["answer"] + 1e-9})
        assert (out["reward"], out["finished"]) == (1.0, True)
        again = _call(client, "math", sid, "submit", {"answer": task["answer"]})
        assert again["ok"] is False and again["reason"] == "episode_finished"
    with _session(client, "math", index=11) as sid:
        out = _output(client, "math", sid, "submit", {"answer": task["answer"] + 0.5})
        assert (out["reward"], out["finished"]) == (0.0, True)
        assert str(task["answer"]) in out["blocks"][0]["text"]


def test_qa_terminal_tool_takes_the_answer(client: httpx.Client) -> None:
    listed = client.get("/qa/tools").json()
    assert listed["terminal_tool"]["name"] == "answer"
    assert listed["terminal_tool"]["arg"] == "answer"
    assert "answer" not in {t["name"] for t in listed["tools"]}
    task = _task(client, "qa", "train", 0)
    with _session(client, "qa") as sid:
        hint = _output(client, "qa", sid, "hint")
        assert repr(task["answer"][0]) in hint["blocks"][0]["text"]
        assert hint["finished"] is False
        messy = f"  The {task['answer'].upper()}!! "
        out = _output(client, "qa", sid, "answer", {"answer": messy})
        assert (out["reward"], out["finished"]) == (1.0, True)
    with _session(client, "qa") as sid:
        out = _output(client, "qa", sid, "answer", {"answer": "certainly not this"})
        assert (out["reward"], out["finished"]) == (0.0, True)


def test_qa_normalisation_and_aliases() -> None:
    from ors_gym.envs.qa import QA, AnswerInput, normalise_answer

    assert normalise_answer("  The  Amazon River. ") == "amazon river"
    env = QA({"question": "q", "answer": "Leonardo da Vinci", "aliases": ["da Vinci"]})
    assert asyncio.run(env.answer(AnswerInput(answer="Da Vinci!"))).reward == 1.0
    with pytest.raises(ValueError, match="'question' and 'answer'"):
        QA({"question": "no answer"})


def _counter_plan(target: int) -> list[tuple[str, dict[str, Any]]]:
    """Calls that take a counter from 0 to ``target``."""
    plan: list[tuple[str, dict[str, Any]]] = []
    value = 0
    while value < target:
        step = min(5, target - value)
        plan.append(("increment", {"amount": step}))
        value += step
    while value > target:
        plan.append(("decrement", {}))
        value -= 1
    return plan


def test_counter_done_grades_state(client: httpx.Client) -> None:
    listed = client.get("/counter/tools").json()
    assert listed["terminal_tool"]["name"] == "done"
    assert listed["terminal_tool"]["arg"] is None
    targets = [_task(client, "counter", "train", i)["target"] for i in range(6)]
    assert any(t < 0 for t in targets) or any(t > 5 for t in targets)
    for index, target in enumerate(targets):
        with _session(client, "counter", index=index) as sid:
            value = 0
            for name, args in _counter_plan(target):
                out = _output(client, "counter", sid, name, args)
                assert out["finished"] is False and out["reward"] == 0.0
                value = out["metadata"]["value"]
            assert value == target
            done = _output(client, "counter", sid, "done")
            assert (done["reward"], done["finished"]) == (1.0, True)
        with _session(client, "counter", index=index) as sid:
            _output(client, "counter", sid, "increment", {"amount": 1})
            done = _output(client, "counter", sid, "done")
            assert done["reward"] == (1.0 if target == 1 else 0.0) and done["finished"] is True


def test_counter_increment_bounds(client: httpx.Client) -> None:
    schema = {t["name"]: t for t in client.get("/counter/tools").json()["tools"]}
    props = schema["increment"]["input_schema"]["properties"]["amount"]
    assert (props["minimum"], props["maximum"], props["default"]) == (1, 5, 1)
    with _session(client, "counter") as sid:
        bad = _call(client, "counter", sid, "increment", {"amount": 6})
        assert bad["ok"] is False and bad["reason"] == "input_validation"
        assert _output(client, "counter", sid, "increment")["metadata"]["value"] == 1


# --- Toolbox -----------------------------------------------------------------------------


def test_toolbox_task_tools_follow_the_task(client: httpx.Client) -> None:
    listed = {t["name"] for t in client.get("/toolbox/tools").json()["tools"]}
    assert listed.isdisjoint({"add", "multiply", "negate"})
    seen: set[frozenset[str]] = set()
    for index in range(6):
        task = _task(client, "toolbox", "train", index)
        with _session(client, "toolbox", index=index) as sid:
            tools = client.get("/toolbox/task_tools", headers={"X-Session-ID": sid}).json()
            names = {t["name"] for t in tools["tools"]}
            assert names == {"submit", "configure", *task["tools"]}
            for spec in tools["tools"]:
                if spec["name"] in ("add", "multiply"):
                    assert spec["input_schema"]["required"] == ["a", "b"]
        seen.add(frozenset(task["tools"]))
    assert len(seen) >= 2  # different tasks really differ


def test_toolbox_solve_with_task_tools(client: httpx.Client) -> None:
    task = _task(client, "toolbox", "train", 2)  # the "-(a + b)" task: add, negate
    assert task["tools"] == ["add", "negate"]
    with _session(client, "toolbox", index=2) as sid:
        refused = _output(client, "toolbox", sid, "multiply", {"a": 2, "b": 3})
        assert "not available" in refused["blocks"][0]["text"]
        numbers = [int(n) for n in task["question"].split("(")[1].split(")")[0].split(" + ")]
        total = _output(client, "toolbox", sid, "add", {"a": numbers[0], "b": numbers[1]})
        negated = _output(client, "toolbox", sid, "negate", {"x": total["metadata"]["result"]})
        value = negated["metadata"]["result"]
        out = _output(client, "toolbox", sid, "submit", {"value": value})
        assert (out["reward"], out["finished"]) == (1.0, True)


def test_toolbox_configure_has_a_rich_schema(client: httpx.Client) -> None:
    tools = {t["name"]: t for t in client.get("/toolbox/tools").json()["tools"]}
    schema = tools["configure"]["input_schema"]
    props = schema["properties"]
    assert props["mode"]["enum"] == ["fast", "balanced", "thorough"]
    assert {"type": "null"} in props["label"]["anyOf"]
    assert (props["retries"]["minimum"], props["retries"]["maximum"]) == (0, 10)
    assert props["temperature"]["type"] == "number" and props["temperature"]["maximum"] == 2.0
    assert props["verbose"]["type"] == "boolean"
    assert props["tags"]["maxItems"] == 3
    ref = props["precision"]["$ref"]
    assert ref.startswith("#/$defs/") and ref.split("/")[-1] in schema["$defs"]
    assert props["version"]["const"] == "v1"
    with _session(client, "toolbox") as sid:
        settings = {"mode": "fast", "tags": ["x"], "precision": {"digits": 4}}
        out = _output(client, "toolbox", sid, "configure", settings)
        assert (out["reward"], out["finished"]) == (0.0, False)
        echoed = out["metadata"]["settings"]
        assert echoed["precision"] == {"digits": 4, "rounding": "half_even"}
        assert echoed["mode"] == "fast" and echoed["label"] is None
        for bad in (
            {"mode": "slow", "precision": {}},
            {"mode": "fast", "precision": {}, "tags": ["a", "b", "c", "d"]},
            {"mode": "fast", "precision": {}, "version": "v2"},
            {"mode": "fast"},
        ):
            result = _call(client, "toolbox", sid, "configure", bad)
            assert result["ok"] is False and result["reason"] == "input_validation", bad


# --- Echo --------------------------------------------------------------------------------


def test_echo_large_result_is_chunked_and_reassembles(client: httpx.Client) -> None:
    text = "ab " + " " * 7  # many chunk boundaries land on spaces
    repeat = 5_000  # 50 KB
    with _session(client, "echo") as sid:
        events = _events(client, "echo", sid, "echo", {"text": text, "repeat": repeat})
    chunks = [d for k, d in events if k == "chunk"]
    assert len(chunks) >= 10
    assert any(c.startswith(" ") for c in chunks)
    result = _join(events)
    assert result["output"]["blocks"][0]["text"] == text * repeat


def test_echo_slow_count_counts_once_per_call(client: httpx.Client) -> None:
    token = uuid.uuid4().hex
    with _session(client, "echo") as sid:
        assert _output(client, "echo", sid, "count", {"token": token})["metadata"]["count"] == 0
        out = _output(client, "echo", sid, "slow_count", {"token": token, "seconds": 0.0})
        assert out["blocks"][0]["text"] == "1"
        assert _output(client, "echo", sid, "count", {"token": token})["metadata"]["count"] == 1


def test_echo_slow_count_resumes_without_rerunning(client: httpx.Client) -> None:
    """Drop the stream after the task_id event, resume with it: the tool ran once."""
    token = uuid.uuid4().hex
    with _session(client, "echo") as sid:
        body = {"name": "slow_count", "input": {"token": token, "seconds": 0.5}, "task_id": None}
        headers = {"X-Session-ID": sid}
        with connect_sse(client, "POST", "/echo/call", json=body, headers=headers) as source:
            first = next(iter(source.iter_sse()))
        assert first.event == "task_id"
        body["task_id"] = first.data
        with connect_sse(client, "POST", "/echo/call", json=body, headers=headers) as source:
            events = [(e.event, e.data) for e in source.iter_sse()]
        assert _join(events)["output"]["metadata"]["count"] == 1
        assert _output(client, "echo", sid, "count", {"token": token})["metadata"]["count"] == 1


def test_echo_fail_is_an_sse_error_event(client: httpx.Client) -> None:
    with _session(client, "echo") as sid:
        events = _events(client, "echo", sid, "fail", {"message": "boom 42"})
    assert events[-1] == ("error", "boom 42")


def test_echo_image_has_requested_size(client: httpx.Client) -> None:
    with _session(client, "echo") as sid:
        out = _output(client, "echo", sid, "image", {"width": 37, "height": 21})
    image = _decode_png(next(b for b in out["blocks"] if b["type"] == "image"))
    assert (image.size, image.mode) == ((37, 21), "RGB")


def test_echo_finish_and_limits(client: httpx.Client) -> None:
    with _session(client, "echo") as sid:
        too_big = _call(client, "echo", sid, "echo", {"text": "x" * 200, "repeat": 100_000})
        assert too_big["ok"] is False and too_big["reason"] == "input_validation"
        out = _output(client, "echo", sid, "finish", {"reward": 0.25})
        assert (out["reward"], out["finished"]) == (0.25, True)


# --- GridWorld ---------------------------------------------------------------------------

_MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def _path(task: dict[str, Any]) -> list[str]:
    """Shortest list of moves from start to goal (the test's own BFS)."""
    size, walls = task["size"], {tuple(w) for w in task["walls"]}
    start, goal = tuple(task["start"]), tuple(task["goal"])
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        for name, (dr, dc) in _MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt in came or nxt in walls or not all(0 <= v < size for v in nxt):
                continue
            came[nxt] = (cell, name)
            queue.append(nxt)
    moves: list[str] = []
    cell = goal
    while (step := came[cell]) is not None:
        cell, name = step
        moves.append(name)
    return moves[::-1]


def _pixel_at(image: Image.Image, cell: list[int], cell_px: int) -> tuple[int, ...]:
    r, c = cell
    pixel = image.getpixel((c * cell_px + cell_px // 2, r * cell_px + cell_px // 2))
    assert isinstance(pixel, tuple)
    return pixel


def test_gridworld_prompt_has_text_and_image(client: httpx.Client) -> None:
    from ors_gym.envs.gridworld import _AGENT, _GOAL, _WALL

    task = _task(client, "gridworld", "train", 1)
    assert task["size"] == 5 and task["max_steps"] > len(_path(task))
    with _session(client, "gridworld", index=1) as sid:
        text, image_block = client.get("/gridworld/prompt", headers={"X-Session-ID": sid}).json()
    assert text["detail"] == {"agent": task["start"], "goal": task["goal"], "size": 5}
    image = _decode_png(image_block)
    side = task["size"] * task["cell_px"]
    assert (image.size, image.mode) == ((side, side), "RGB")
    assert _pixel_at(image, task["start"], task["cell_px"]) == _AGENT
    assert _pixel_at(image, task["goal"], task["cell_px"]) == _GOAL
    for wall in task["walls"]:
        assert _pixel_at(image, wall, task["cell_px"]) == _WALL


@pytest.mark.parametrize("index", [0, 1, 5])
def test_gridworld_shortest_path_reaches_goal(client: httpx.Client, index: int) -> None:
    from ors_gym.envs.gridworld import _AGENT, GOAL_REWARD, STEP_PENALTY

    task = _task(client, "gridworld", "train", index)
    moves = _path(task)
    with _session(client, "gridworld", index=index) as sid:
        for i, move in enumerate(moves):
            out = _output(client, "gridworld", sid, "move", {"direction": move})
            meta = out["metadata"]
            assert out["blocks"][0]["detail"] == {k: meta[k] for k in ("agent", "goal", "size")}
            assert (
                _pixel_at(_decode_png(out["blocks"][1]), meta["agent"], task["cell_px"]) == _AGENT
            )
            last = i == len(moves) - 1
            assert out["finished"] is last
            assert out["reward"] == (GOAL_REWARD if last else STEP_PENALTY)
        assert meta["agent"] == task["goal"] and meta["steps"] == len(moves)


def test_gridworld_edges_block_with_step_penalty(client: httpx.Client) -> None:
    spec = {"size": 3, "start": [0, 0], "goal": [2, 2], "walls": [[1, 0]]}
    with _session(client, "gridworld", task_spec=spec) as sid:
        for direction in ("up", "left", "down"):
            out = _output(client, "gridworld", sid, "move", {"direction": direction})
            assert out["metadata"]["blocked"] is True and out["metadata"]["agent"] == [0, 0]
            assert (out["reward"], out["finished"]) == (-0.01, False)
        bad = _call(client, "gridworld", sid, "move", {"direction": "north"})
        assert bad["ok"] is False and bad["reason"] == "input_validation"
    schema = client.get("/gridworld/tools").json()["tools"][0]["input_schema"]
    assert schema["properties"]["direction"]["enum"] == ["up", "down", "left", "right"]


def test_gridworld_rejects_bad_task_specs() -> None:
    from ors_gym.envs.gridworld import GridWorld

    for spec, message in [
        ({"start": [1, 1], "goal": [1, 1]}, "must differ"),
        ({"start": [0, 9]}, "outside"),
        ({"size": 1}, "size"),
        ({"walls": [[4, 4]]}, "must not cover"),
    ]:
        with pytest.raises(ValueError, match=message):
            GridWorld(spec)


# --- Latency -----------------------------------------------------------------------------


def test_latency_ends_after_length_calls(client: httpx.Client) -> None:
    with _session(client, "latency", task_spec={"delay_ms": 1, "length": 3}) as sid:
        outs = [_output(client, "latency", sid, "wait") for _ in range(3)]
    assert [o["finished"] for o in outs] == [False, False, True]
    assert {o["reward"] for o in outs} == {0.0}
    assert all(
        t["delay_ms"] == 20
        for t in client.post("/latency/tasks", json={"split": "train"}).json()["tasks"]
    )


# --- package -----------------------------------------------------------------------------


def test_package_import_does_not_need_the_sdk() -> None:
    """``ors_gym.envs`` (and ``ors_gym``) import with the SDK blocked; classes load lazily."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'openreward':\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import ors_gym, ors_gym.envs as e\n"
        "assert e.DEFAULT_ENV in e.BUNDLED and 'openreward' not in sys.modules\n"
        "try:\n"
        "    e.Math\n"
        "except ImportError as exc:\n"
        "    print('lazy', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("lazy blocked openreward")


def test_lazy_attributes_resolve_to_the_classes() -> None:
    import ors_gym.envs as envs
    from ors_gym.serving import load_environment_classes

    assert set(BUNDLED) <= set(dir(envs))
    for name, spec in BUNDLED.items():
        (cls,) = load_environment_classes([spec])
        assert getattr(envs, name) is cls and cls.__name__ == name
    with pytest.raises(AttributeError, match="Nope"):
        _ = envs.Nope


def test_the_test_envs_load_lazily_and_are_not_bundled() -> None:
    import ors_gym.envs as envs
    import ors_gym.envs.testing as testing
    from ors_gym.serving import load_environment_classes

    assert not set(TEST_ENVS) & set(BUNDLED) and not set(TEST_ENVS) & set(dir(envs))
    for name, spec in TEST_ENVS.items():
        (cls,) = load_environment_classes([spec])
        assert getattr(testing, name) is cls and cls.__name__ == name
    with pytest.raises(AttributeError, match="Nope"):
        _ = testing.Nope
