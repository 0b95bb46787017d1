"""Group scoring with the bundled Judged environment, in-process and over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ors_gym.env import OrsEnv
from ors_gym.envs.judged import Judged, final_answer, quality
from ors_gym.errors import OrsError, OrsRequestError
from ors_gym.protocol import Message, TextBlock, ToolCallBlock
from ors_gym.scoring import _downgrade, candidate, score_group
from ors_gym.scripted import ScriptedLLM
from ors_gym.serving import ServerThread
from ors_gym.trajectories import read_trajectories
from ors_gym.wrappers.conversation import Conversation
from ors_gym.wrappers.recording import RecordTrajectories

TASK = Judged.list_tasks("train")[0]  # a desk lamp: bright, adjustable, energy; 30 words
TEXTS = [
    "A bright lamp.",
    "This bright, adjustable desk lamp saves energy and gives a warm, even light for "
    "reading, drawing and late work, with a sturdy base and a soft switch that lasts.",
    "Lamp.",
    "An adjustable lamp for your desk.",
]


@pytest.fixture(scope="module")
def judged_url() -> Iterator[str]:
    with ServerThread(["ors_gym.envs.judged:Judged", "ors_gym.envs.math:Math"]) as srv:
        yield srv.url


@pytest.fixture(params=["local", "http"])
def judged(request: pytest.FixtureRequest, judged_url: str) -> Iterator[OrsEnv]:
    if request.param == "http":
        env = OrsEnv(base_url=judged_url, env_name="judged")
    else:
        env = OrsEnv(env_class="ors_gym.envs.judged:Judged")
    yield env
    env.close()


def _win_rates(qualities: list[float]) -> list[float]:
    return [
        sum(1.0 if q > o else 0.5 if q == o else 0.0
            for j, o in enumerate(qualities) if j != i) / (len(qualities) - 1)
        for i, q in enumerate(qualities)
    ]


def test_recorded_trajectories_are_scored_as_a_group(judged: OrsEnv, tmp_path: Path) -> None:
    path = tmp_path / "judged.jsonl"
    env = RecordTrajectories(judged, path)
    rewards = []
    for text in TEXTS:
        env.reset(options={"index": 0})
        _, reward, terminated, _, _ = env.step(text)  # routed to the terminal answer tool
        assert terminated
        rewards.append(float(reward))
    qualities = [quality(t, TASK["keywords"], TASK["target_words"])["quality"] for t in TEXTS]
    assert rewards == pytest.approx(qualities)

    env.reset(options={"index": 0})  # a session for the task, to score in
    group = read_trajectories(path)
    scores = score_group(env, group)
    assert scores == pytest.approx(_win_rates(qualities))
    assert scores.index(max(scores)) == 1 and scores.index(min(scores)) == 2
    detailed = score_group(env, group, detailed=True)
    assert [s.metadata["words"] for s in detailed] == [  # type: ignore[index]
        quality(t, [], 1)["words"] for t in TEXTS
    ]
    env.close()
    assert len(read_trajectories(path)) == len(TEXTS)  # the scoring reset wrote nothing


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "ors"])
def test_conversations_in_any_format_score_like_trajectories(judged: OrsEnv, fmt: str) -> None:
    conv = Conversation(judged, fmt)
    group = []
    for text in TEXTS:
        conv.reset(options={"index": 0})
        conv.step(text)
        group.append(conv.messages)
    conv.reset(options={"index": 0})
    qualities = [quality(t, TASK["keywords"], TASK["target_words"])["quality"] for t in TEXTS]
    assert score_group(conv, group) == pytest.approx(_win_rates(qualities))


def test_an_explicit_answer_call_is_what_is_judged(judged: OrsEnv) -> None:
    judged.reset(options={"index": 0})
    called = [
        Message(role="user", blocks=[TextBlock(text="write")]),
        Message(role="assistant", blocks=[
            TextBlock(text="Here it is."),
            ToolCallBlock(id="c1", name="answer", input={"text": TEXTS[1]}),
        ]),
    ]
    plain = [
        {"role": "user", "content": "write"},
        {"role": "assistant", "content": TEXTS[2]},
    ]
    scores = score_group(judged, [{"messages": called, "metadata": {"run": 1}}, plain],
                         detailed=True)
    assert [s.reward for s in scores] == [1.0, 0.0]
    assert final_answer(called) == TEXTS[1] and final_answer(plain) == TEXTS[2]


def test_scripted_groups_have_win_rates_summing_to_half_the_group(judged: OrsEnv) -> None:
    conv = Conversation(judged, "openai")
    group = []
    for seed in range(5):
        llm = ScriptedLLM("openai", seed=seed)
        messages, _ = conv.reset(options={"index": 3})
        conv.step(llm.act(messages, judged.tools))
        group.append(conv.messages)
    conv.reset(options={"index": 3})
    scores = score_group(conv, group)
    assert len(scores) == 5 and all(0.0 <= s <= 1.0 for s in scores)
    assert sum(scores) == pytest.approx(5 / 2)  # each pair shares one point
    assert len(set(scores)) > 1  # the texts differ, so do their scores


def test_score_group_errors(judged_url: str) -> None:
    math = OrsEnv(base_url=judged_url, env_name="math")
    judged = OrsEnv(env_class="ors_gym.envs.judged:Judged")
    try:
        math.reset(seed=0)
        group = [[{"role": "user", "content": "hi"}]]
        with pytest.raises(OrsRequestError, match="does not support group scoring"):
            score_group(math, group)
        with pytest.raises(OrsError, match=r"call env.reset\(\)"):
            score_group(judged, group)
        judged.reset(seed=0)
        with pytest.raises(ValueError, match="at least one candidate"):
            score_group(judged, [])
        with pytest.raises(ValueError, match="metadata has 2 entries for 1 candidates"):
            score_group(judged, group, metadata=[{}, {}])
        with pytest.raises(TypeError, match="a group member must be"):
            score_group(judged, [42])
        with pytest.raises(ValueError, match="group member 0 has no messages"):
            score_group(judged, [[]])
    finally:
        math.close()
        judged.close()


def test_candidates_and_old_servers() -> None:
    built = candidate([{"role": "user", "content": "hi"}], {"run": 7}, index=2)
    assert built["metadata"] == {"run": 7, "candidate": 2}
    assert built["messages"][0] == Message(role="user", blocks=[TextBlock(text="hi")])

    turn = Message(role="assistant", blocks=[
        TextBlock(text="ok"), ToolCallBlock(id="c", name="answer", input={"text": "x"}),
    ])
    old = _downgrade(turn, {"text", "image"})  # servers before SDK 0.1.157
    assert [b.type for b in old.blocks] == ["text", "text"]
    assert "answer" in old.blocks[1].text  # type: ignore[union-attr]
    assert _downgrade(turn, {"text", "image", "tool_call"}) is turn


def test_judged_grading_parts() -> None:
    graded = quality("Bright and ADJUSTABLE, yes", ["bright", "adjustable", "energy"], 4)
    assert graded["missing"] == ["energy"] and graded["words"] == 4
    assert graded["quality"] == pytest.approx(0.7 * 2 / 3 + 0.3)
    assert quality("ice cream!", ["ice cream"], 2)["coverage"] == 1.0
    assert quality("brightness", ["bright"], 1)["coverage"] == 0.0  # whole words only
    assert final_answer([]) == ""
    with pytest.raises(ValueError, match="keywords"):
        Judged({"target_words": 3})
    assert Judged._supports_score_group()


