"""``OrsResourcesServer`` under NeMo Gym's own code: its session-contract checker, the legacy
seed/tool/verify path through the app's real routes and middleware, 0.7.0's typed seed,
reward components, failures masked with NeMo Gym's failure kinds, and no ORS session left
open on the ORS server (``Graded.live`` counts them there).

Needs nemo-gym, which has a venv of its own: ``bash scripts/nemo-gym-venv.sh --test``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip(
    "nemo_gym.testing.session_conformance",
    reason="nemo-gym has a venv of its own: bash scripts/nemo-gym-venv.sh --test",
)

import httpx
from _bodies import response
from _envs import Graded
from fastapi.testclient import TestClient
from nemo_gym.base_resources_server import ResourcesSeedSessionRequest
from nemo_gym.episode_types import EpisodeId, TaskId
from nemo_gym.failure_kinds import FAILURE_KINDS
from nemo_gym.testing.session_conformance import check_resources_session_contract

from ors_gym._uvicorn import UvicornThread
from ors_gym.nemo_gym import dataset_rows
from ors_gym.serving import ServerThread

MakeServer = Callable[..., Any]


def graded(url: str, **config: Any) -> dict[str, Any]:
    """The config of a server for the user's own ``Graded``, over HTTP."""
    return {"base_url": url, "env_name": "graded", **config}


def typed_seed(session: str, fields: dict[str, Any]) -> ResourcesSeedSessionRequest:
    return ResourcesSeedSessionRequest(
        resources_session_id=session, episode_id=EpisodeId(rollout_id=f"rollout-{session}"),
        task_id=TaskId(taskset="ors", task_id=str(fields["task_id"])),
        task_data={k: v for k, v in fields.items() if k != "responses_create_params"})


@pytest.mark.parametrize("where", ["bundled", "own"])
def test_the_session_contract_holds(where: str, ors_url: str, make_server: MakeServer) -> None:
    config = {"env_id": "ors/Counter-v0"} if where == "bundled" else graded(ors_url)
    (row,) = dataset_rows(**config, limit=1)
    server = make_server(**config)
    check_resources_session_contract(server.setup_webserver(), typed_seed("s-1", row),
                                     keeps_state=True)
    assert Graded.live == 0


def test_a_legacy_episode_is_graded_by_the_environment(ors_url: str,
                                                       make_server: MakeServer) -> None:
    rows = dataset_rows(**graded(ors_url), limit=2)
    client = TestClient(make_server(**graded(ors_url)).setup_webserver())
    for row, answer, reward in ((rows[0], "2", 1.0), (rows[1], "7", 0.0)):
        assert client.post("/seed_session", json=row).status_code == 200
        assert Graded.live == 1  # the ORS session, open on the ORS server
        assert client.post("/add", json={"n": 2}).text == "total 2"
        verdict = client.post("/verify", json={**row, "response": response(answer)}).json()
        assert verdict["reward"] == reward and verdict["mask_sample"] is False
        assert verdict["reward_components"] == {"effort": 0.25, "correct": reward,
                                                "reached": reward}
        assert verdict["ors_rewards"] == [0.0, reward] and verdict["ors_finished"] is True
        assert verdict["task_id"] == row["task_id"]  # the row's fields come back
        assert Graded.live == 0  # released at verify: a legacy caller never closes


def test_tool_calls_answer_in_text(ors_url: str, make_server: MakeServer) -> None:
    (row,) = dataset_rows(**graded(ors_url), limit=1)
    client = TestClient(make_server(**graded(ors_url)).setup_webserver())
    assert "call /seed_session first" in client.post("/add", json={"n": 1}).text
    client.post("/seed_session", json=row)
    unknown = client.post("/no_such_tool", json={})
    assert unknown.status_code == 200 and "no_such_tool" in unknown.text
    assert client.post("/submit", json={"answer": "2"}).text == "right"
    after = client.post("/add", json={"n": 1}).text
    assert after.startswith("The episode has finished: add was not run")
    verdict = client.post("/verify", json={**row, "response": response("ignored")}).json()
    assert verdict["reward"] == 1.0 and verdict["ors_steps"] == 2  # no answer routed again


def test_task_tools_have_routes(make_server: MakeServer) -> None:
    (row,) = dataset_rows("ors/Toolbox-v0", limit=1)
    names = {tool["name"] for tool in row["responses_create_params"]["tools"]}
    assert "add" in names  # a task tool, in the row's tools
    client = TestClient(make_server(env_id="ors/Toolbox-v0").setup_webserver())
    client.post("/seed_session", json=row)
    assert client.post("/add", json={"a": 2, "b": 3}).text == "5"


def test_a_typed_session_keeps_its_verdict_until_closed(ors_url: str,
                                                        make_server: MakeServer) -> None:
    (row,) = dataset_rows(**graded(ors_url), limit=1)
    client = TestClient(make_server(**graded(ors_url)).setup_webserver())
    seed = typed_seed("typed-1", row).model_dump(mode="json")
    assert client.post("/seed_session", json=seed).json()["resources_session_id"] == "typed-1"
    assert client.post("/add", json={"n": 2}).text == "total 2"
    body = {**seed["task_data"], "responses_create_params": row["responses_create_params"],
            "response": response("2")}
    repeated = client.post("/seed_session", json=seed)  # the same session, not a second one
    assert repeated.status_code == 200 and Graded.live == 1
    first, again = (client.post("/verify", json=body).json() for _ in range(2))
    assert first["reward"] == again["reward"] == 1.0 and Graded.live == 0
    close = {"resources_session_id": "typed-1", "episode_id": seed["episode_id"]}
    assert client.post("/close_session", json=close).status_code == 200
    assert client.post("/seed_session", json=seed).status_code == 409


def test_a_changed_prompt_is_refused_or_flagged(ors_url: str, make_server: MakeServer) -> None:
    (row,) = dataset_rows(**graded(ors_url), limit=1)
    stale = {**row, "ors_prompt_sha256": "0" * 64}
    refusing = TestClient(make_server(**graded(ors_url)).setup_webserver())
    refused = refusing.post("/seed_session", json=stale)
    assert refused.status_code == 409 and "no longer matches" in refused.text
    flagging = TestClient(make_server(**graded(ors_url, on_prompt_mismatch="flag"))
                          .setup_webserver())
    assert flagging.post("/seed_session", json=stale).status_code == 200
    verdict = flagging.post("/verify", json={**stale, "response": response("2")}).json()
    assert verdict["ors_prompt_mismatch"] is True and verdict["mask_sample"] is False
    assert Graded.live == 0


def test_a_row_naming_no_task_is_refused(ors_url: str, make_server: MakeServer) -> None:
    client = TestClient(make_server(**graded(ors_url)).setup_webserver())
    refused = client.post("/seed_session", json={"responses_create_params": {"input": "hi"}})
    assert refused.status_code == 422 and "ors_split and ors_index" in refused.text


def test_a_stopped_ors_server_masks_the_sample(make_server: MakeServer) -> None:
    with ServerThread([Graded]) as ors:
        (row,) = dataset_rows(**graded(ors.url), limit=1)
        config = graded(ors.url, env_kwargs={"max_retries": 0})
        client = TestClient(make_server(**config).setup_webserver())
        client.post("/seed_session", json=row)
        assert client.post("/add", json={"n": 2}).text == "total 2"
    told = client.post("/add", json={"n": 1}).text
    assert told.startswith("The episode ended:")
    verdict = client.post("/verify", json={**row, "response": response("2")}).json()
    assert verdict["mask_sample"] is True and verdict["reward"] == 0.0
    assert verdict["failure_kind"] == "transport_unreachable"
    assert verdict["failure_kind"] in FAILURE_KINDS and verdict["failure_reason"]
    Graded.live = 0  # that server's sessions went with it


def test_sixteen_sessions_at_once_are_kept_apart(ors_url: str, make_server: MakeServer) -> None:
    rows = dataset_rows(**graded(ors_url))
    server = make_server(**graded(ors_url))

    async def episode(client: httpx.AsyncClient, i: int) -> dict[str, Any]:
        row = rows[i % len(rows)]
        target = row["ors_index"] + 2
        assert (await client.post("/seed_session", json=row)).status_code == 200
        for _ in range(target):
            await client.post("/add", json={"n": 1})
        answer = str(target if i % 2 == 0 else target + 1)
        reply = await client.post("/verify", json={**row, "response": response(answer)})
        return dict(reply.json())

    async def run_all(url: str) -> list[dict[str, Any]]:
        clients = [httpx.AsyncClient(base_url=url, timeout=60) for _ in range(16)]
        try:
            return list(await asyncio.gather(*(episode(c, i) for i, c in enumerate(clients))))
        finally:
            for client in clients:
                await client.aclose()

    with UvicornThread(server.setup_webserver(), name="nemo-gym-ors", what="resources server") \
            as served:
        verdicts = asyncio.run(run_all(served.url))
    assert [v["reward"] for v in verdicts] == [float(i % 2 == 0) for i in range(16)]
    assert all(v["reward_components"]["reached"] == 1.0 for v in verdicts)
    assert Graded.live == 0


def test_every_ors_failure_has_a_name_from_nemo_gym_s_vocabulary() -> None:
    from ors_gym import errors
    from ors_gym.nemo_gym._episode import failure_kind

    classes = [getattr(errors, name) for name in errors.__all__]
    failures = [c for c in classes if isinstance(c, type) and issubclass(c, errors.OrsError)]
    assert len(failures) >= 10
    kinds = {failure_kind(cls("x")) for cls in failures}
    assert kinds <= FAILURE_KINDS
    assert {"session_expired", "transport_unreachable", "transport_timeout",
            "provider_quota_exhausted", "provider_unavailable"} <= kinds


def test_importing_without_nemo_gym_names_the_extra_and_the_script() -> None:
    code = ("import sys; sys.modules['nemo_gym'] = None\n"
            "try:\n    import ors_gym.nemo_gym\n"
            "except ImportError as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.startswith("OrsDependencyError") and "ors-gym[nemo-gym]" in out
    assert "scripts/nemo-gym-venv.sh" in out


def test_an_image_is_a_note_and_a_raising_tool_masks_the_sample(make_server: MakeServer) -> None:
    (row,) = dataset_rows("ors/Echo-v0", limit=1)
    client = TestClient(make_server(env_id="ors/Echo-v0").setup_webserver())
    client.post("/seed_session", json=row)
    text = client.post("/image", json={"width": 4, "height": 3}).text
    assert text.startswith("4x3 image\n[1 image(s) returned by the tool, not shown")
    assert client.post("/fail", json={"message": "boom"}).text.startswith("The episode ended:")
    verdict = client.post("/verify", json={**row, "response": response(None)}).json()
    assert verdict["mask_sample"] is True and verdict["failure_kind"] == "verifier_error"
    assert "boom" in verdict["failure_reason"]


def test_the_config_shows_no_credential_of_its_env_kwargs() -> None:
    from ors_gym.nemo_gym import OrsResourcesServerConfig

    config = OrsResourcesServerConfig(
        host="127.0.0.1", port=0, entrypoint="app.py", name="ors",
        env_id="ors/Counter-v0", env_kwargs={"secrets": {"API_TOKEN": "tok-not-for-logs"}})
    assert "tok-not-for-logs" not in repr(config) + str(config)
    assert config.make_kwargs()["secrets"] == {"API_TOKEN": "tok-not-for-logs"}
