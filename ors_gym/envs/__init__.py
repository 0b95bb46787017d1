"""ORS environments bundled with ors_gym, written with the openreward SDK.

Each class lives in its own module and imports the SDK; this package module
does not, so ``import ors_gym`` works without the ``local`` extra, and
importing it changes no environment variable (the SDK's quiet defaults are set
when a class is first loaded, see ``backends.local.sdk.quiet_sdk_logging``). Classes are
imported on first attribute access (``ors_gym.envs.GridWorld``), and
``BUNDLED`` maps each class name to its ``module:Class`` spec for
``backends.local.sdk.load_environment_classes`` and the gym registry
(ids ``ors/<Name>-v0``). The environments for testing clients are apart, in
:mod:`ors_gym.envs.testing`, and registered only on request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ors_gym.backends.local.sdk import lazy_class

if TYPE_CHECKING:
    from ors_gym.envs.counter import Counter
    from ors_gym.envs.gridworld import GridWorld
    from ors_gym.envs.judged import Judged
    from ors_gym.envs.math import Math
    from ors_gym.envs.qa import QA
    from ors_gym.envs.sandbox import Sandbox
    from ors_gym.envs.toolbox import Toolbox

__all__ = [
    "BUNDLED",
    "DEFAULT_ENV",
    "QA",
    "Counter",
    "GridWorld",
    "Judged",
    "Math",
    "Sandbox",
    "Toolbox",
    "resolve_bundled",
]

#: Class name -> ``module:Class``; the first entry is the default environment.
BUNDLED: dict[str, str] = {
    "GridWorld": "ors_gym.envs.gridworld:GridWorld",
    "Math": "ors_gym.envs.math:Math",
    "QA": "ors_gym.envs.qa:QA",
    "Counter": "ors_gym.envs.counter:Counter",
    "Toolbox": "ors_gym.envs.toolbox:Toolbox",
    "Judged": "ors_gym.envs.judged:Judged",
    "Sandbox": "ors_gym.envs.sandbox:Sandbox",
}

#: The environment a server of all bundled environments serves at ``/``.
DEFAULT_ENV = "GridWorld"


def resolve_bundled(name: str) -> str | None:
    """The ``module:Class`` spec of bundled env ``name`` (case-insensitive), or None."""
    for cls_name, spec in BUNDLED.items():
        if cls_name.lower() == name.lower():
            return spec
    return None


def __getattr__(name: str) -> Any:
    """Import a bundled environment class on first access (PEP 562)."""
    return lazy_class(BUNDLED, globals(), __name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(BUNDLED))
