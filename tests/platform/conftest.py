"""A stand-in platform (``tests/_platform.py``) in front of a front door and two SDK servers.

One address serves the platform's API and, through a ``FrontDoor``, the session
host of deployment ``Acme/tools`` (Echo, then Math). The SDK's variables point
both the SDK's client and ors_gym at it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ors_gym.envs import BUNDLED
from ors_gym.envs.testing import TEST_ENVS
from ors_gym.platform import _preflight
from ors_gym.serving import ServerThread
from tests._fault_servers import UvicornThread
from tests._front_door import FrontDoor
from tests._platform import DEPLOYMENT, KEY, Platform


@pytest.fixture(scope="package")
def platform_app() -> Iterator[tuple[Platform, str]]:
    with ServerThread([TEST_ENVS["Echo"], BUNDLED["Math"]]) as tools:
        app = Platform(KEY, FrontDoor({DEPLOYMENT: tools.url}, KEY))
        with UvicornThread(app) as srv:
            yield app, srv.url


@pytest.fixture
def platform(
    platform_app: tuple[Platform, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Platform]:
    """The platform, its records cleared, with the SDK's variables pointing at it."""
    app, url = platform_app
    app.clear()
    app.required.clear()
    app.difficulty.clear()
    app.ids.clear()
    app.fail_rollouts = 0
    app.hold = None
    app.refuse = None
    app.refuse_prefix = "/"
    app.create_quotes_env = False
    _preflight._KNOWN.clear()
    for var in ("OPENREWARD_API_URL", "OPENREWARD_SESSION_URL"):
        monkeypatch.setenv(var, url)
    monkeypatch.setenv("OPENREWARD_URL", url)
    monkeypatch.setenv("OPENREWARD_API_KEY", KEY)
    monkeypatch.setenv("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    yield app
    if app.hold is not None:
        app.hold.set()
