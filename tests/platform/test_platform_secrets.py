"""Secrets travel as the SDK's client sends them, against the stand-in platform: each with
the ``allowed_domains`` the platform's egress proxy enforces (a well-known name gets its
domains, a ``(value, domains)`` pair the ones given), and a plain value under another
name is refused before anything is sent, as the SDK's client refuses it."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from ors_gym.backends.http import AsyncHttpBackend
from ors_gym.env import OrsEnv
from tests._platform import DEPLOYMENT, KEY, Platform, Recorded

SECRETS: dict[str, Any] = {
    "OPENAI_API_KEY": "sk-user-1",
    "HF_TOKEN": "hf-user-2",
    "MY_TOKEN": ("my-token-3", ["api.example.com", "files.example.com"]),
}


@pytest.fixture
def sdk() -> Iterator[Any]:
    from openreward import OpenReward

    client = OpenReward(api_key=KEY)
    yield client
    client.close()


def _secrets_sent(request: Recorded) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(request.headers["x-secrets"])))


def _created(platform: Platform) -> Recorded:
    (created,) = [r for r in platform.requests("/create") if r.path == "/create"]
    return created


def test_secrets_carry_their_allowed_domains_as_the_sdks(platform: Platform, sdk: Any) -> None:
    with sdk.environments.get(DEPLOYMENT).session(split="train", index=0,
                                                  secrets=SECRETS) as session:
        session.get_prompt()
    theirs = _secrets_sent(_created(platform))
    platform.clear()
    with OrsEnv(deployment=DEPLOYMENT, secrets=SECRETS) as env:
        env.reset(options={"split": "train", "index": 0})
        shown = repr(env.unwrapped.settings) + repr(env.spec) + repr(env)
    ours = _secrets_sent(_created(platform))
    assert ours.keys() == theirs.keys()
    for name in SECRETS:  # the user's: value and domains, entry for entry
        assert ours[name] == theirs[name]
    for name in ("api_key", "OPENREWARD_API_KEY"):  # the key's own (the SDK lists a host
        # twice when the session and API hosts are one, as they are here)
        assert ours[name]["value"] == theirs[name]["value"] == KEY
        assert set(ours[name]["allowed_domains"]) == set(theirs[name]["allowed_domains"])
    assert ours["OPENAI_API_KEY"] == {"value": "sk-user-1", "allowed_domains": ["api.openai.com"]}
    assert ours["MY_TOKEN"]["allowed_domains"] == ["api.example.com", "files.example.com"]
    for value in ("sk-user-1", "hf-user-2", "my-token-3"):
        assert value not in shown


def test_a_plain_value_under_another_name_is_refused_as_the_sdk_refuses_it(
    platform: Platform, sdk: Any
) -> None:
    with pytest.raises(ValueError, match="MY_TOKEN"):
        with sdk.environments.get(DEPLOYMENT).session(
                split="train", index=0, secrets={"MY_TOKEN": "plain"}) as session:
            session.get_prompt()
    platform.clear()
    with pytest.raises(ValueError, match=r"'MY_TOKEN'.*\(value, \['api.example.com'\]\)"):
        OrsEnv(deployment=DEPLOYMENT, secrets={"MY_TOKEN": "plain"})

    async def create() -> None:  # and straight to a backend's create_session
        async with AsyncHttpBackend(deployment=DEPLOYMENT) as backend:
            await backend.create_session("echo", split="train", index=0,
                                         secrets={"MY_TOKEN": "plain"})

    with pytest.raises(ValueError, match="MY_TOKEN"):
        asyncio.run(create())
    assert platform.requests("/create") == []  # nothing sent for either


def test_a_plain_server_still_takes_any_name(server_url: str) -> None:
    with OrsEnv(base_url=server_url, env_name="echo",
                secrets={"MY_TOKEN": "plain", "PAIR": ("v", ["x.test"])}) as env:
        env.reset(options={"split": "train", "index": 0})


def test_the_well_known_names_are_the_sdks() -> None:
    from openreward.api.sandboxes.secrets import WELL_KNOWN_SECRETS as SDK

    from ors_gym.backends.http._settings import WELL_KNOWN_SECRETS

    assert {k: list(v) for k, v in WELL_KNOWN_SECRETS.items()} == SDK
