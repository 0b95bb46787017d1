"""SB3-facing wrappers over real ORS environments, over HTTP and in-process."""

from __future__ import annotations

import enum
import hashlib
import itertools
import logging
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.env_checker import check_env

from ors_gym.env import OrsEnv
from ors_gym.serving import ServerThread, quiet_sdk_logging
from ors_gym.wrappers import (
    DiscreteToolActions,
    ImageObservation,
    MetadataVector,
    MissingValueError,
    TextVector,
    enumerate_tool_calls,
    hash_text,
)

quiet_sdk_logging()

from openreward.environments import (  # noqa: E402 - after the SDK's environment is set
    Environment,
    JSONObject,
    Split,
    TextBlock,
    ToolOutput,
    tool,
)
from pydantic import BaseModel, Field  # noqa: E402

GRID = {"size": 5, "start": [0, 0], "goal": [4, 4], "walls": []}
AGENT_RGB = (230, 40, 40)  # GridWorld's agent colour


# -- a small environment with one enumerable tool and one that is not ----------------------------


class DialInput(BaseModel):
    """Enum, bool and small-int required parameters; an optional enum; an optional free text."""

    mode: Literal["low", "mid", "high"]
    loud: bool
    level: int = Field(ge=0, le=3)
    tag: Literal["x", "y"] | None = None
    note: str | None = None


class SayInput(BaseModel):
    text: str


class Dials(Environment):
    """Echoes the arguments a ``dial`` call carried (``exclude_unset``: omitted stays omitted)."""

    def __init__(
        self, task_spec: JSONObject | None = None, secrets: dict[str, str] | None = None
    ) -> None:
        super().__init__(task_spec or {}, secrets or {})
        self.count = 0

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        return [{"id": "only"}]

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Turn the dials.", detail={"count": 0})]

    @tool
    async def dial(self, params: DialInput) -> ToolOutput:
        """Set the dials."""
        self.count += 1
        sent = params.model_dump(exclude_unset=True)
        return ToolOutput(
            blocks=[TextBlock(text=f"Dials set: {sent}", detail={"count": self.count})],
            metadata={"sent": sent, "count": self.count, "level": params.level},
            reward=0.0,
            finished=False,
        )

    @tool
    async def say(self, params: SayInput) -> ToolOutput:
        """Say something (free text: not enumerable)."""
        return ToolOutput(blocks=[TextBlock(text=params.text)], reward=0.0, finished=False)


@pytest.fixture(scope="module")
def dials_url() -> Iterator[str]:
    with ServerThread([Dials]) as srv:
        yield srv.url


@pytest.fixture
def ors_env(backend_kind: str, server_url: str, dials_url: str) -> Iterator[Any]:
    """``ors_env(name, **kwargs)``: bundled env or ``"Dials"`` over the parametrized backend."""
    from ors_gym.envs import BUNDLED

    made: list[OrsEnv] = []

    def factory(name: str, **kwargs: Any) -> OrsEnv:
        if name == "Dials":
            url, env_class = dials_url, Dials
        else:
            url, env_class = server_url, BUNDLED[name]
        if backend_kind == "http":
            env = OrsEnv(base_url=url, env_name=name.lower(), **kwargs)
        else:
            env = OrsEnv(env_class=env_class, **kwargs)
        made.append(env)
        return env

    yield factory
    for env in made:
        env.close()


def _check_env_strict(env: Any) -> None:
    """SB3's ``check_env`` with every warning it emits turned into a failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, warn=True)


def _dial_calls() -> list[dict[str, Any]]:
    """The documented enumeration order of ``dial``: schema order, first parameter slowest.

    ``tag`` defaults to None, one of its values, so it has no separate "omitted" call.
    """
    calls = []
    for mode, loud, level, tag in itertools.product(
        ["low", "mid", "high"], [False, True], range(4), ["x", "y", None]
    ):
        args: dict[str, Any] = {"mode": mode, "loud": loud, "level": level, "tag": tag}
        calls.append({"name": "dial", "arguments": args})
    return calls


# -- DiscreteToolActions -----------------------------------------------------------------------


def test_gridworld_moves_are_numbered(ors_env: Any) -> None:
    env = DiscreteToolActions(ors_env("GridWorld"))
    assert env.action_space == spaces.Discrete(4)
    directions = [c["arguments"]["direction"] for c in env.calls]
    assert directions == ["up", "down", "left", "right"]
    assert env.action_meanings()[3] == 'move(direction="right")'

    env.reset(options={"task_spec": GRID})
    _, _, _, _, info = env.step(np.int64(3))  # numpy ints, as SB3 passes them
    assert info["calls"][0]["metadata"]["agent"] == [0, 1]
    _, _, _, _, info = env.step(1)
    assert info["calls"][0]["metadata"]["agent"] == [1, 1]


def test_enum_bool_int_and_optional_params_enumerate_in_order(ors_env: Any) -> None:
    env = DiscreteToolActions(ors_env("Dials"), tools=["dial"])
    expected = _dial_calls()
    assert env.calls == expected
    assert env.action_space == spaces.Discrete(3 * 2 * 4 * 3)
    assert env.action_meanings()[0] == 'dial(mode="low", loud=false, level=0, tag="x")'
    assert env.action_meanings()[2] == 'dial(mode="low", loud=false, level=0, tag=null)'
    assert env.action_meanings()[3] == 'dial(mode="low", loud=false, level=1, tag="x")'

    env.reset()
    for index, call in enumerate(expected):  # the server accepts every call, as sent
        _, _, _, _, info = env.step(index)
        record = info["calls"][0]
        assert record["ok"], record["error"]
        assert record["metadata"]["sent"] == call["arguments"]


class Button(enum.StrEnum):
    A = "a"
    B = "b"
    C = "c"


class PressInput(BaseModel):
    button: Button
    hard: bool = False


class Buttons(Dials):
    """Dials plus ``press(button, hard=False)``, which reports the ``hard`` it ran with."""

    async def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Press a button.")]

    @tool
    async def press(self, params: PressInput) -> ToolOutput:
        """Press a button, hard or not."""
        return ToolOutput(
            blocks=[TextBlock(text="pressed")],
            metadata={"button": params.button.value, "hard": params.hard},
            reward=0.0,
            finished=False,
        )


def test_optional_parameter_with_a_default_has_no_separate_omitted_action() -> None:
    env = OrsEnv(env_class=Buttons)
    try:
        wrapped = DiscreteToolActions(env, tools=["press"])
        # Enum(3) x bool: "hard omitted" would run the same call as hard=False.
        assert wrapped.action_space == spaces.Discrete(6)
        assert [c["arguments"] for c in wrapped.calls] == [
            {"button": b, "hard": h} for b in ("a", "b", "c") for h in (False, True)
        ]
        wrapped.reset()
        ran = []
        for index in range(6):
            _, _, _, _, info = wrapped.step(index)
            ran.append(info["calls"][0]["metadata"])
        assert ran == [{"button": b, "hard": h} for b in ("a", "b", "c") for h in (False, True)]
    finally:
        env.close()


def _press(hard: dict[str, Any]) -> Any:
    from ors_gym.protocol import ToolSpec

    schema = {
        "type": "object",
        "properties": {"button": {"enum": ["a", "b", "c"]}, "hard": hard},
        "required": ["button"],
    }
    return ToolSpec(name="press", description="", input_schema=schema)


@pytest.mark.parametrize(
    "hard",
    [
        {"type": "boolean"},  # no default: the server decides, so omitting differs
        {"type": "boolean", "default": 1},  # a default that is not one of the values
    ],
)
def test_optional_parameter_without_a_listed_default_keeps_omitted(hard: dict[str, Any]) -> None:
    calls = enumerate_tool_calls([_press(hard)])
    assert len(calls) == 9
    assert [c["arguments"] for c in calls[:3]] == [
        {"button": "a", "hard": False},
        {"button": "a", "hard": True},
        {"button": "a"},
    ]
    with_default = enumerate_tool_calls([_press({"type": "boolean", "default": True})])
    assert [c["arguments"] for c in with_default[:2]] == [
        {"button": "a", "hard": False},
        {"button": "a", "hard": True},
    ]
    assert len(with_default) == 6


def test_infinite_tool_is_an_error_naming_tool_and_parameter(ors_env: Any) -> None:
    env = ors_env("Dials")
    with pytest.raises(ValueError, match=r"tool 'say': required parameter 'text'"):
        DiscreteToolActions(env)
    skipped = DiscreteToolActions(env, skip_infinite=True)
    assert skipped.calls == _dial_calls()
    with pytest.raises(ValueError, match=r"\['nosuch'\] not among the environment's tools"):
        DiscreteToolActions(env, tools=["nosuch"])


def test_a_left_out_terminal_tool_is_named_in_a_warning(
    ors_env: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ors_gym.wrappers import actions

    monkeypatch.setattr(actions, "_WARNED", set())  # once per process: start afresh
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        env = DiscreteToolActions(ors_env("QA"))  # hint(), and the terminal answer(answer: str)
    assert env.action_meanings() == ["hint()"]
    (warning,) = [r.getMessage() for r in caplog.records if "terminal tool" in r.getMessage()]
    assert "'answer' is not among the actions" in warning and "calls=[...]" in warning
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        DiscreteToolActions(ors_env("QA"))  # said once is enough
    assert not [r for r in caplog.records if "terminal tool" in r.getMessage()]
    with caplog.at_level(logging.WARNING, logger="ors_gym"):
        DiscreteToolActions(ors_env("GridWorld"))  # no terminal tool: nothing to say
    assert not [r for r in caplog.records if "terminal tool" in r.getMessage()]


def test_toolbox_configure_needs_a_call_list(ors_env: Any) -> None:
    env = ors_env("Toolbox")
    with pytest.raises(ValueError, match=r"tool 'configure': required parameter 'precision'"):
        DiscreteToolActions(env, tools=["configure"])
    with pytest.raises(ValueError, match="no tool call could be enumerated"):
        DiscreteToolActions(env, skip_infinite=True)  # submit(value: int) is unbounded too

    calls = [
        {"name": "configure", "arguments": {"mode": "fast", "precision": {"digits": 1}}},
        {"name": "configure", "arguments": {"mode": "thorough", "verbose": True, "precision": {}}},
        {"name": "submit", "arguments": {"value": 7}},
    ]
    wrapped = DiscreteToolActions(env, calls=calls)
    assert wrapped.calls == calls and wrapped.action_space == spaces.Discrete(3)
    assert wrapped.action(np.int64(2)) == {"tool_calls": [calls[2]], "message": ""}
    _check_env_strict(TextVector(wrapped, dim=32))

    wrapped.reset(options={"task_spec": {"target": 7}})
    _, _, _, _, info = wrapped.step(1)
    assert info["calls"][0]["metadata"]["settings"]["mode"] == "thorough"
    _, reward, terminated, _, _ = wrapped.step(2)
    assert terminated and reward == 1.0


def test_action_mapping_rejects_bad_actions_and_copies_calls(ors_env: Any) -> None:
    env = DiscreteToolActions(ors_env("GridWorld"))
    with pytest.raises(ValueError, match=r"action 4 is out of range: choose from \[0, 4\)"):
        env.action(4)
    with pytest.raises(ValueError, match="must be an integer"):
        env.action("up")
    env.action(0)["tool_calls"][0]["arguments"]["direction"] = "down"
    assert env.calls[0]["arguments"]["direction"] == "up"


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([], "calls is empty"),
        ([{"arguments": {}}], r"calls\[0\] must be a dict with a str 'name'"),
        ([{"name": "a", "input": {}}], r"unknown key\(s\) \['input'\]"),
        ([{"name": "a", "arguments": 3}], r"calls\[0\]\['arguments'\] must be a dict"),
        ([{"name": "a"}, {"name": "a", "arguments": {}}], "the same call more than once"),
    ],
)
def test_bad_call_lists_are_rejected(ors_env: Any, calls: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DiscreteToolActions(ors_env("GridWorld"), calls=calls)


def test_too_many_calls_is_an_error() -> None:
    from ors_gym.protocol import ToolSpec

    spec = ToolSpec(name="dial", input_schema=DialInput.model_json_schema())
    with pytest.raises(ValueError, match="combine into 72 calls, more than max_actions=50"):
        enumerate_tool_calls([spec], max_actions=50)
    with pytest.raises(ValueError, match="required parameter 'level' has no finite set"):
        enumerate_tool_calls([spec], max_int_range=3)  # level has 4 values
    assert len(enumerate_tool_calls([spec], max_int_range=4)) == 72
    no_input = ToolSpec(name="ping", input_schema=None)
    assert enumerate_tool_calls([no_input]) == [{"name": "ping", "arguments": {}}]


# -- ImageObservation --------------------------------------------------------------------------


def _agent_cell(image: np.ndarray, cell_px: int) -> list[int]:
    rows, cols = np.nonzero(np.all(image == AGENT_RGB, axis=-1))
    return [int(rows.min()) // cell_px, int(cols.min()) // cell_px]


@pytest.mark.parametrize("channel_order", ["HWC", "CHW"])
def test_gridworld_image_passes_sb3_check_env(ors_env: Any, channel_order: str) -> None:
    env = ImageObservation(
        DiscreteToolActions(ors_env("GridWorld")), size=(40, 40), channel_order=channel_order
    )
    shape = (40, 40, 3) if channel_order == "HWC" else (3, 40, 40)
    assert env.observation_space == spaces.Box(0, 255, shape, np.uint8)
    _check_env_strict(env)


def test_image_shows_the_agent_where_the_metadata_says(ors_env: Any) -> None:
    env = ImageObservation(DiscreteToolActions(ors_env("GridWorld")), size=(160, 160))
    obs, _ = env.reset(options={"task_spec": GRID})  # 5x5 at 32 px: native size, no resampling
    assert _agent_cell(obs, 32) == [0, 0]
    for action in (1, 1, 3):  # down, down, right
        obs, _, _, _, info = env.step(action)
        assert _agent_cell(obs, 32) == info["calls"][0]["metadata"]["agent"]
    assert _agent_cell(obs, 32) == [2, 1]


def test_default_frames_are_large_and_train_size_frames_are_exact(ors_env: Any) -> None:
    """Frames are 160 px by default; nearest resizing to 40 px (what training uses) gives
    the grid at 8 px per cell exactly, as GridWorld draws it with ``cell_px=8``."""
    native = ImageObservation(DiscreteToolActions(ors_env("GridWorld")), size=(160, 160))
    small = ImageObservation(
        DiscreteToolActions(ors_env("GridWorld")), size=(40, 40), resample="nearest"
    )
    drawn_small = ImageObservation(DiscreteToolActions(ors_env("GridWorld")), size=(40, 40))
    big, _ = native.reset(options={"task_spec": GRID})
    assert big.shape == (160, 160, 3)
    raw, _ = native.unwrapped.reset(options={"task_spec": GRID})
    assert raw["images"][0].shape == (160, 160, 3)  # the frame itself, not a resize
    resized, _ = small.reset(options={"task_spec": GRID})
    exact, _ = drawn_small.reset(options={"task_spec": {**GRID, "cell_px": 8}})
    assert np.array_equal(resized, exact)
    for action in (1, 3, 3):
        resized, *_ = small.step(action)
        exact, *_ = drawn_small.step(action)
        assert np.array_equal(resized, exact)


def test_image_is_resized_and_channels_first(ors_env: Any) -> None:
    env = ImageObservation(
        DiscreteToolActions(ors_env("GridWorld")),
        size=(20, 30),
        channel_order="CHW",
        resample="nearest",
    )
    obs, _ = env.reset(options={"task_spec": GRID})
    assert obs.shape == (3, 20, 30) and obs.dtype == np.uint8
    hwc = obs.transpose(1, 2, 0)
    rows, cols = np.nonzero(np.all(hwc == AGENT_RGB, axis=-1))
    assert rows.max() < 4 and cols.max() < 6  # the agent's cell, top-left, scaled by 20/160, 30/160


def test_step_without_image_repeats_the_last_one(ors_env: Any) -> None:
    calls = [
        {"name": "move", "arguments": {"direction": "down"}},
        {"name": "move", "arguments": {"direction": "north"}},  # invalid: an error, no image
    ]
    env = ImageObservation(DiscreteToolActions(ors_env("GridWorld"), calls=calls), size=(160, 160))
    env.reset(options={"task_spec": GRID})
    moved, *_ = env.step(0)
    repeated, _, _, _, info = env.step(1)
    assert info["calls"][0]["ok"] is False
    assert np.array_equal(repeated, moved) and _agent_cell(repeated, 32) == [1, 0]


def test_text_only_env_gives_zeros(ors_env: Any) -> None:
    env = ImageObservation(DiscreteToolActions(ors_env("Dials"), tools=["dial"]), size=(8, 8))
    obs, _ = env.reset()
    assert obs.shape == (8, 8, 3) and not obs.any()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": (0, 4)}, "two positive integers"),
        ({"size": 40}, "two positive integers"),
        ({"channel_order": "NCHW"}, "choose 'HWC' or 'CHW'"),
        ({"resample": "cubic"}, "resample='cubic'"),
    ],
)
def test_image_observation_rejects_bad_arguments(
    ors_env: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ImageObservation(ors_env("GridWorld"), **kwargs)


# -- TextVector --------------------------------------------------------------------------------


def _documented_encoding(text: str, dim: int, ngram: tuple[int, int], seed: int) -> np.ndarray:
    """TextVector's docstring, implemented independently."""
    tokens = re.findall(r"\w+", text.lower())
    vector = np.zeros(dim)
    for n in range(ngram[0], ngram[1] + 1):
        for i in range(len(tokens) - n + 1):
            gram = " ".join(tokens[i : i + n])
            h = int.from_bytes(
                hashlib.blake2b(gram.encode(), digest_size=8, key=str(seed).encode()).digest(),
                "little",
            )
            vector[h % dim] += 1.0 if h < 2**63 else -1.0
    norm = np.linalg.norm(vector)
    return vector / norm if norm else vector


def test_text_vector_follows_its_documented_encoding() -> None:
    text = "Moved right to [2, 3]; the goal is at [4, 4]. Ünïcode wörds too!"
    for dim, ngram, seed in [(256, (1, 2), 0), (64, (1, 3), 5), (7, (2, 2), 123)]:
        got = hash_text(text, dim, ngram, seed)
        assert got.dtype == np.float32 and got.shape == (dim,)
        np.testing.assert_allclose(got, _documented_encoding(text, dim, ngram, seed), atol=1e-6)
    assert abs(float(np.linalg.norm(hash_text(text))) - 1.0) < 1e-6
    assert not hash_text("").any() and not hash_text(" ,.; ").any()
    assert not np.array_equal(hash_text(text, seed=0), hash_text(text, seed=1))
    np.testing.assert_array_equal(hash_text("Goal  AT, goal"), hash_text("goal at goal"))


def test_text_vector_is_the_same_in_another_process() -> None:
    code = (
        "import sys, numpy as np; from ors_gym.wrappers import hash_text; "
        "sys.stdout.write(hash_text('the goal is at [4, 4]', 32).tobytes().hex())"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout)
    assert outputs == {hash_text("the goal is at [4, 4]", 32).tobytes().hex()}


def test_colliding_features_add_with_their_signs() -> None:
    # dim=1: every feature collides; each contributes its sign to the single slot.
    words = [f"w{i}" for i in range(40)]
    sign = {w: float(hash_text(w, dim=1, ngram=(1, 1))[0]) for w in words}
    assert set(sign.values()) == {1.0, -1.0}
    plus = [w for w in words if sign[w] > 0]
    minus = [w for w in words if sign[w] < 0]
    assert hash_text(f"{plus[0]} {plus[1]}", dim=1, ngram=(1, 1))[0] == 1.0
    assert hash_text(f"{plus[0]} {minus[0]}", dim=1, ngram=(1, 1))[0] == 0.0  # cancelled out
    # dim=2: two words sharing a slot with the same sign count twice there.
    slot = {w: int(np.flatnonzero(hash_text(w, dim=2, ngram=(1, 1)))[0]) for w in words}
    same = [w for w in plus if slot[w] == slot[plus[0]]]
    other = next(w for w in words if slot[w] != slot[plus[0]])
    vector = hash_text(f"{same[0]} {same[1]} {other}", dim=2, ngram=(1, 1))
    expected = np.zeros(2)
    expected[slot[plus[0]]] = 2.0
    expected[slot[other]] = sign[other]
    np.testing.assert_allclose(vector, expected / np.linalg.norm(expected), atol=1e-6)


def test_text_vector_wraps_an_env_for_sb3(ors_env: Any) -> None:
    env = TextVector(DiscreteToolActions(ors_env("GridWorld")), dim=64)
    assert env.observation_space == spaces.Box(-1.0, 1.0, (64,), np.float32)
    _check_env_strict(env)
    obs, _ = env.reset(options={"task_spec": GRID})
    raw = env.env.reset(options={"task_spec": GRID})[0]["text"]
    np.testing.assert_array_equal(obs, hash_text(raw, 64))
    with pytest.raises(ValueError, match="ngram must be"):
        TextVector(env, ngram=(2, 1))
    with pytest.raises(ValueError, match="dim must be a positive integer"):
        TextVector(env, dim=0)


# -- MetadataVector ----------------------------------------------------------------------------


def test_gridworld_metadata_vector_passes_sb3_check_env(ors_env: Any) -> None:
    env = MetadataVector(
        DiscreteToolActions(ors_env("GridWorld")),
        keys={"agent": 2, "goal": 2},
        low=0,
        high=4,
        normalize=True,
    )
    assert env.observation_space == spaces.Box(-1.0, 1.0, (4,), np.float32)
    _check_env_strict(env)
    obs, _ = env.reset(options={"task_spec": {**GRID, "start": [0, 2], "goal": [4, 1]}})
    np.testing.assert_allclose(obs, [-1.0, 0.0, 1.0, -0.5])  # from the prompt's detail
    obs, *_ = env.step(1)  # down: from the call's metadata
    np.testing.assert_allclose(obs, [-0.5, 0.0, 1.0, -0.5])


def test_metadata_vector_raw_values_and_bounds(ors_env: Any) -> None:
    env = MetadataVector(
        DiscreteToolActions(ors_env("GridWorld")),
        keys=["size", "steps"],
        low={"size": 2},
        high={"size": 64, "steps": 100},
    )
    assert env.observation_space == spaces.Box(
        np.array([2, -np.inf], np.float32), np.array([64, 100], np.float32), dtype=np.float32
    )
    with pytest.raises(MissingValueError) as caught:
        env.reset(options={"task_spec": GRID})  # the prompt has no step count
    message = str(caught.value)
    assert "'steps' is not in this step's metadata" in message
    assert "available: ['agent', 'goal', 'size']" in message

    env = MetadataVector(DiscreteToolActions(ors_env("GridWorld")), keys={"agent": 2}, high=3)
    env.reset(options={"task_spec": {**GRID, "start": [3, 3]}})
    outside = r"element 0 \(agent\[0\]\) = 4.0 is outside \[-inf, 3.0\]"
    with pytest.raises(ValueError, match=outside):
        env.step(1)


def test_metadata_vector_shape_errors(ors_env: Any) -> None:
    env = MetadataVector(DiscreteToolActions(ors_env("GridWorld")), keys=["agent"])
    with pytest.raises(ValueError, match=r"'agent' holds 2 number\(s\) .* but keys declares 1"):
        env.reset(options={"task_spec": GRID})
    base = DiscreteToolActions(ors_env("GridWorld"))
    with pytest.raises(ValueError, match="keys is empty"):
        MetadataVector(base, keys=[])
    with pytest.raises(ValueError, match=r"low names \['nosuch'\]"):
        MetadataVector(base, keys=["size"], low={"nosuch": 0})
    with pytest.raises(ValueError, match="normalize=True needs finite"):
        MetadataVector(base, keys=["size"], normalize=True)
    with pytest.raises(ValueError, match=r"low has 3 numbers; give one, one per vector element"):
        MetadataVector(base, keys={"agent": 2}, low=[0, 0, 0])


def test_metadata_vector_repeats_after_a_step_without_values(ors_env: Any) -> None:
    calls = [
        {"name": "dial", "arguments": {"mode": "low", "loud": True, "level": 2}},
        {"name": "dial", "arguments": {"mode": "loud", "loud": True, "level": 2}},  # invalid
    ]
    env = MetadataVector(DiscreteToolActions(ors_env("Dials"), calls=calls), keys=["count"])
    obs, _ = env.reset()
    assert obs.tolist() == [0.0]  # the prompt block's detail
    obs, *_ = env.step(0)
    assert obs.tolist() == [1.0]
    obs, _, _, _, info = env.step(1)
    assert info["calls"][0]["ok"] is False and obs.tolist() == [1.0]
    obs, *_ = env.step(0)
    assert obs.tolist() == [2.0]
