"""env_overrides, the required-secrets preflight and task difficulty, against a stand-in
platform: the SDK's own client and ors_gym send the same query or session, and what
arrived is compared (paths, query, bodies, the key header)."""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ors_gym.env import OrsEnv
from ors_gym.errors import OrsRequestError
from ors_gym.platform import (
    AsyncPlatformClient,
    PlatformClient,
    TaskDifficulty,
    _preflight,
    dataset_indices,
    task_weights,
    weighted_indices,
)
from ors_gym.vector import OrsVectorEnv
from tests._platform import DEPLOYMENT, KEY, Platform, Recorded

OVERRIDES = {"OPENAI_BASE_URL": "http://trainer.test:8000/v1", "OPENAI_API_KEY": "sk-trainer-1"}
CHARS = dict.fromkeys(("mean", "p1", "p10", "p25", "p50", "p75", "p90", "p99"), 120.0)


@pytest.fixture
def sdk() -> Iterator[Any]:
    from openreward import OpenReward

    client = OpenReward(api_key=KEY)
    yield client
    client.close()


def _api(seen: list[Recorded]) -> list[tuple[str, str, dict[str, str], str | None]]:
    return [(r.method, r.path, r.query, r.headers.get("x-api-key")) for r in seen]


def _rows() -> list[dict[str, Any]]:
    return [
        {"task_index": 0, "avg_reward": 1.0, "min_reward": 1.0, "max_reward": 1.0,
         "num_rollouts": 8, "response_chars": CHARS, "split": "train", "variant": None},
        {"task_index": 2, "avg_reward": 0.5, "min_reward": 0.0, "max_reward": 1.0,
         "num_rollouts": 4, "response_chars": CHARS, "split": "train", "variant": None},
        {"task_index": 1, "avg_reward": 0.0, "min_reward": 0.0, "max_reward": 0.0,
         "num_rollouts": 2, "response_chars": CHARS, "split": "test", "variant": None},
    ]


# -- required secrets ---------------------------------------------------------------------


def test_required_secrets_ask_as_the_sdk_asks(platform: Platform, sdk: Any) -> None:
    platform.required[DEPLOYMENT] = ["OPENAI_API_KEY", "TAVILY_API_KEY"]
    expected = sdk.environments.get(DEPLOYMENT).list_required_secrets()
    theirs = _api(platform.requests("/v1/"))
    platform.clear()
    with PlatformClient() as client:
        assert client.required_secrets(DEPLOYMENT) == expected
    ours = _api(platform.requests("/v1/"))
    assert ours == theirs == [
        ("GET", "/v1/environments/Acme/tools/required-secrets", {}, KEY)]


def test_the_preflight_names_missing_secrets_before_any_session(
    platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    platform.required[DEPLOYMENT] = ["OPENAI_API_KEY", "TAVILY_API_KEY", "api_key"]
    caplog.set_level(logging.DEBUG)
    with pytest.raises(OrsRequestError) as raised:  # asked as the vector env is made
        OrsVectorEnv(8, deployment=DEPLOYMENT, check_secrets=True,
                     secrets={"TAVILY_API_KEY": "tv-secret"})
    message = str(raised.value)
    # Only the missing one is named; the key's own secrets ride along as the SDK adds them.
    assert "OPENAI_API_KEY" in message and "TAVILY_API_KEY" not in message
    assert "no session was opened" in message
    # One question for the eight sub-envs, and nothing asked of the session host: no
    # session id, no discovery, no release.
    assert [r.path for r in platform.requests()] == [
        "/v1/environments/Acme/tools/required-secrets"]
    assert KEY not in caplog.text and "tv-secret" not in caplog.text

    platform.clear()
    _preflight._KNOWN.clear()
    with OrsEnv(deployment=DEPLOYMENT, check_secrets=True) as env, \
            pytest.raises(OrsRequestError, match="no session was opened"):
        env.reset(options={"split": "train", "index": 0})
    assert [r.path for r in platform.requests()] == [
        "/v1/environments/Acme/tools/required-secrets"]

    platform.clear()
    with OrsEnv(deployment=DEPLOYMENT, check_secrets=True,
                secrets={"OPENAI_API_KEY": "o", "TAVILY_API_KEY": "t"}) as env:
        env.reset(options={"split": "train", "index": 0})
        env.reset(options={"split": "train", "index": 1})
    assert platform.requests("/v1/") == []  # the answer is kept for the process


def test_check_secrets_needs_a_deployment() -> None:
    with pytest.raises(ValueError, match="check_secrets needs deployment"):
        OrsEnv(env_class="ors_gym.envs.math:Math", check_secrets=True)


# -- env_overrides -----------------------------------------------------------------------


def _sessions_created(platform: Platform) -> list[Recorded]:
    return [r for r in platform.requests("/create_session") if r.json()]


def _secret_names(request: Recorded) -> set[str]:
    return set(json.loads(base64.b64decode(request.headers["x-secrets"])))


def test_env_overrides_go_with_the_session_as_the_sdks(
    platform: Platform, sdk: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with sdk.environments.get(DEPLOYMENT).session(split="train", index=0,
                                                  env_overrides=OVERRIDES) as session:
        session.get_prompt()
    (theirs,) = _sessions_created(platform)
    platform.clear()
    with OrsEnv(deployment=DEPLOYMENT, env_overrides=OVERRIDES) as env:
        env.reset(options={"split": "train", "index": 0})
        shown = repr(env.unwrapped.settings) + repr(env)
    (ours,) = _sessions_created(platform)
    assert ours.json() == theirs.json() == {"env": OVERRIDES}
    assert ours.headers["x-deployment"] == theirs.headers["x-deployment"] == DEPLOYMENT
    assert ours.headers["x-api-key"] == theirs.headers["x-api-key"] == KEY
    assert _secret_names(ours) == _secret_names(theirs)
    # The discovery session id carries no overrides (the SDK's carries none either).
    assert [r.body for r in platform.requests("/create_session") if r is not ours] == [b"{}"]
    for secret in (OVERRIDES["OPENAI_API_KEY"], KEY):
        assert secret not in shown and secret not in caplog.text


def test_env_overrides_need_a_deployment_and_are_redacted_in_specs() -> None:
    import gymnasium as gym

    from ors_gym.registration import register_hosted

    with pytest.raises(ValueError, match="env_overrides needs deployment"):
        OrsEnv(env_class="ors_gym.envs.math:Math", env_overrides=OVERRIDES)
    env_id = register_hosted("Acme/redacted", env_overrides=OVERRIDES)
    assert "sk-trainer-1" not in repr(gym.spec(env_id))


# -- task difficulty and weighted sampling -------------------------------------------------


def test_task_difficulty_asks_as_the_sdk_asks(platform: Platform, sdk: Any) -> None:
    platform.difficulty[DEPLOYMENT] = _rows()
    expected = sdk.environments.get(DEPLOYMENT).get_task_difficulty(
        split="train", model_name="qwen", min_model_params=7, training_stage="rl")
    theirs = _api(platform.requests("/v1/"))
    platform.clear()
    with PlatformClient() as client:
        got = client.task_difficulty(DEPLOYMENT, split="train", model_name="qwen",
                                     min_model_params=7, training_stage="rl")
    assert _api(platform.requests("/v1/")) == theirs
    assert theirs[0][2] == {"split": "train", "model_name": "qwen", "min_model_params": "7",
                            "training_stage": "rl"}
    assert [(d.task_index, d.avg_reward, d.num_rollouts, d.response_chars.p50)  # type: ignore[union-attr]
            for d in got] == [(d.task_index, d.avg_reward, d.num_rollouts,
                               d.response_chars.p50) for d in expected]


def test_task_weights_favour_the_uncertain_and_keep_every_task() -> None:
    rows = [TaskDifficulty.from_json(r) for r in _rows()[:2]]
    weights = task_weights(rows, 4)
    assert weights[2] == 1.0 and weights[1] == weights[3] == 1.0  # half right; unseen
    assert 0 < weights[0] < 0.1  # always solved: kept, rarely drawn
    hard = task_weights(rows, 4, prefer="hard")
    assert hard[2] == 0.5 and hard[0] < hard[2]
    scaled = task_weights([TaskDifficulty(0, 10.0, 0, 10, 1), TaskDifficulty(1, 5.0, 0, 10, 1),
                           TaskDifficulty(2, 0.0, 0, 0, 1)], 3)
    assert scaled[1] == 1.0 and scaled[0] == scaled[2] < 0.1  # rewards outside [0, 1]
    with pytest.raises(ValueError, match="prefer"):
        task_weights(rows, 4, prefer="easy")  # type: ignore[arg-type]


def test_a_vector_env_draws_its_tasks_by_weight() -> None:
    weights = [0.0] * 1000
    weights[3] = weights[7] = 1.0
    venv = OrsVectorEnv(4, env_class="ors_gym.envs.math:Math", task_weights=weights)
    try:
        drawn = collections.Counter()
        for seed in range(3):
            _, infos = venv.reset(seed=seed)
            drawn.update(int(i) for i in infos["index"])
    finally:
        venv.close()
    assert set(drawn) == {3, 7}
    with OrsEnv(env_class="ors_gym.envs.math:Math", task_weights=[1.0, 2.0]) as env, \
            pytest.raises(ValueError, match="2 weights but split 'train' has 1000 tasks"):
        env.reset()
    with pytest.raises(ValueError, match="non-negative"):
        OrsEnv(env_class="ors_gym.envs.math:Math", task_weights=[1.0, -1.0])
    # Normalised once, when checked: each reset draws with them as they are.
    with OrsEnv(env_class="ors_gym.envs.math:Math", task_weights=[1, 3]) as env:
        assert env.settings.task_weights == (0.25, 0.75)


def test_dataset_rows_follow_the_weights() -> None:
    from ors_gym.skyrl import rows

    weights = [0.0] * 1000
    weights[5] = 1.0
    assert dataset_indices(3, {}) == [0, 1, 2]
    made = rows("ors/Math-v0", num_tasks=1000, task_weights=weights)
    assert len(made) == 1000 and {r["index"] for r in made} == {5}
    drawn = weighted_indices([1.0, 0.0, 3.0], 400, seed=1)
    counts = np.bincount(drawn, minlength=3)
    assert counts[1] == 0 and counts[2] > 2 * counts[0]


def test_the_async_client_and_its_weights(platform: Platform) -> None:
    platform.difficulty[DEPLOYMENT] = _rows()

    async def ask() -> list[float]:
        async with AsyncPlatformClient() as client:
            return await client.task_weights(DEPLOYMENT, 3, split="train")

    weights = asyncio.run(ask())
    assert weights[1] == weights[2] == 1.0 and weights[0] < 0.1
    assert platform.requests("/v1/")[0].query == {"split": "train"}


def test_the_cli_reaches_a_deployment_with_its_overrides_and_preflight(
    platform: Platform, tmp_path: Any, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ors_gym.cli import main

    platform.required[DEPLOYMENT] = ["OPENAI_API_KEY"]
    argv = ["eval", "--deployment", DEPLOYMENT, "--variant", "math", "--model", "scripted",
            "--episodes", "2",
            "--max-turns", "2", "--no-progress-bar", "--check-secrets"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err
    assert "needs the secret(s) OPENAI_API_KEY" in err and KEY not in err
    assert not platform.requests("/create_session")  # stopped before any session

    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    assert main([*argv, "--env-override", "OPENAI_BASE_URL"]) == 2  # NAME alone, unset
    assert "--env-override OPENAI_BASE_URL: the environment variable OPENAI_BASE_URL is not " \
        "set" in capsys.readouterr().err
    monkeypatch.setenv("OPENAI_BASE_URL", "http://trainer.test/v1")
    platform.ids[DEPLOYMENT] = "env-9"
    assert main([*argv, "--out", str(tmp_path / "b"), "--secret", "OPENAI_API_KEY",
                 "--env-override", "OPENAI_BASE_URL", "--env-override", "MODEL=tiny=1",
                 "--upload", "cli-run"]) == 0
    out = capsys.readouterr().out
    created = _sessions_created(platform)
    assert len(created) == 2 and all(r.json() == {"env": {
        "OPENAI_BASE_URL": "http://trainer.test/v1", "MODEL": "tiny=1"}} for r in created)
    assert "OPENAI_API_KEY" in _secret_names(created[0])
    started = [e for e in platform.received_events() if e["eventType"] == "rollout"]
    assert [(e["environment"], e["variant"], e["environment_id"]) for e in started] == [
        (DEPLOYMENT, "math", "env-9")] * 2
    assert "sk-from-env" not in out and KEY not in out
    assert len(platform.requests("/v1/environments/Acme/tools/required-secrets")) == 1
    assert main(["eval", "ors/Math-v0", "--model", "scripted", "--env-override", "A=b"]) == 2
    assert "go with --deployment" in capsys.readouterr().err


@pytest.mark.parametrize("environ", [
    {},
    {"OPENREWARD_URL": "http://example.test:81"},
    {"OPENREWARD_URL": "https://a.test", "OPENREWARD_API_URL": "http://api.other.test"},
])
def test_the_api_host_is_the_sdks(environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
                                   ) -> None:
    from openreward import OpenReward

    from ors_gym.backends.http import platform_api_location

    for var in ("OPENREWARD_URL", "OPENREWARD_API_URL"):
        monkeypatch.delenv(var, raising=False)
    for var, value in environ.items():
        monkeypatch.setenv(var, value)
    assert platform_api_location()[0] == OpenReward(api_key="k").base_url
    monkeypatch.setenv("OPENREWARD_API_URL", "api.example.test")
    with pytest.raises(ValueError, match="OPENREWARD_API_URL"):
        platform_api_location()
