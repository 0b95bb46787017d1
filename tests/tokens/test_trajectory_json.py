"""A trajectory survives a JSON round trip whole: every field of it and of its rows, read
back equal (a field added later without JSON support fails here)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from ors_gym.tokens import TokenRow, Trajectory


def _image(seed: int) -> Any:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")


def _full() -> Trajectory:
    """A two-row trajectory with a value (not a default) in every field."""
    first = TokenRow(prompt_ids=[1, 2], completion_ids=[3, 4, 5], mask=[1, 1, 0],
                     logprobs=[-0.5, -0.25, 0.0], turns=1, first_message=2,
                     images=[_image(0)], multi_modal_data={"processor": "output"})
    second = TokenRow(prompt_ids=[1, 2, 3, 4, 5, 6], completion_ids=[7], mask=[1],
                      logprobs=[-1.0], turns=1, first_message=4, images=[_image(1), _image(2)])
    return Trajectory(
        rows=[first, second],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"id": "call_1_0", "type": "function",
                       "function": {"name": "move", "arguments": {"to": "up"}}}]}],
        tools=[{"type": "function", "function": {"name": "move", "parameters": {}}}],
        renderer="renderers:qwen3",
        rewards=[0.5, 1.0],
        stop_reason="completed",
        logprobs_given=False,
        images=[np.arange(24, dtype=np.uint8).reshape(2, 4, 3), np.zeros((3, 3), np.float32)],
        multi_modal_data={"processor": "output"},
        policy_versions=[3, None],
        reward_parts={"format": 0.25, "answer": 1.25},
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if hasattr(a, "tobytes") and hasattr(a, "mode"):  # PIL
        return (type(b) is type(a) or hasattr(b, "mode")) and (a.mode, a.size, a.tobytes()) == (
            b.mode, b.size, b.tobytes())
    return bool(a == b) and type(a) is type(b)


#: The one field not carried: the processor's output (tensors), rebuilt from the images.
NOT_CARRIED = {"multi_modal_data"}


def test_every_field_survives_a_json_round_trip() -> None:
    traj = _full()
    back = Trajectory.from_dict(json.loads(json.dumps(traj.to_dict())))
    for f in dataclasses.fields(Trajectory):
        if f.name in NOT_CARRIED:
            assert getattr(back, f.name) is None
        elif f.name != "rows":
            assert _same(getattr(back, f.name), getattr(traj, f.name)), f.name
    assert len(back.rows) == len(traj.rows)
    for got, want in zip(back.rows, traj.rows, strict=True):
        for f in dataclasses.fields(TokenRow):
            if f.name in NOT_CARRIED:
                assert getattr(got, f.name) is None
            else:
                assert _same(getattr(got, f.name), getattr(want, f.name)), f.name
    assert back.to_trl(0) == {**traj.to_trl(0), "images": back.rows[0].images}
    assert back.reward == traj.reward == 1.5


def test_the_dict_shares_nothing_with_the_trajectory() -> None:
    traj = _full()
    written = traj.to_dict()
    written["rows"][0]["completion_ids"].append(9)
    written["messages"][0]["content"][0]["text"] = "changed"
    written["reward_parts"]["format"] = 9.0
    assert traj.rows[0].completion_ids == [3, 4, 5]
    assert traj.messages[0]["content"][0]["text"] == "Hi"
    assert traj.reward_parts["format"] == 0.25


def test_a_dict_that_is_no_trajectory_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"Trajectory\.to_dict"):
        Trajectory.from_dict({"rows": []})
