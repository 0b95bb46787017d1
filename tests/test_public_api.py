"""The top level: the names a user needs, lazy apps, no aliases, a light import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ors_gym
from ors_gym.turn import Elapsed


def test_every_public_name_resolves_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ors_gym.__all__:
            assert getattr(ors_gym, name) is not None, name
    assert set(ors_gym.__all__) <= set(dir(ors_gym))


def test_the_public_face_keeps_only_user_names() -> None:
    plumbing = {"make_backend", "decode_blocks", "as_action", "Elapsed", "Catalog", "Backend",
                "AsyncBackend", "tools_as", "parse_action", "ParsedAction", "make_env_fns"}
    assert not plumbing & set(ors_gym.__all__)
    errors = {n for n in ors_gym.__all__ if n.startswith("Ors") and n.endswith("Error")}
    assert errors == {"OrsError"}  # the others are imported from ors_gym.errors


def test_apps_load_on_first_use_and_are_the_apps_own_functions() -> None:
    import ors_gym.eval

    assert ors_gym.evaluate is ors_gym.eval.evaluate
    assert ors_gym.aevaluate is ors_gym.eval.aevaluate


@pytest.mark.parametrize("name", ["Backend", "Catalog", "OrsToolError", "make_backend",
                                  "parse_action", "tools_as"])
def test_a_name_that_lives_elsewhere_is_not_a_top_level_attribute(name: str) -> None:
    with pytest.raises(AttributeError, match=name):
        getattr(ors_gym, name)


def test_the_package_raises_no_deprecation_warning_anywhere() -> None:
    from pathlib import Path

    root = Path(ors_gym.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "DeprecationWarning" in p.read_text(encoding="utf-8")]
    assert offenders == []


def test_an_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        ors_gym.no_such_name  # noqa: B018


_FRESH_IMPORT = """
import json, os, sys
import gymnasium  # sets PYGAME_HIDE_SUPPORT_PROMPT itself, before ors_gym is imported
before = dict(os.environ)
import ors_gym
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
apps = ("ors_gym.eval", "ors_gym.envs.")
heavy = sorted(m for m in sys.modules if m.split(".")[0] == "openreward" or m.startswith(apps))
print(json.dumps({"changed": changed, "heavy": heavy}))
"""


def test_import_changes_no_environment_variable_and_imports_no_sdk() -> None:
    # as a user's shell: none of the SDK's variables set
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENREWARD_")}
    done = subprocess.run([sys.executable, "-c", _FRESH_IMPORT], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"changed": [], "heavy": []}


@given(st.floats(allow_nan=True), st.floats(allow_nan=True))
def test_elapsed_values_that_compare_equal_hash_equal(a: float, b: float) -> None:
    x, y = Elapsed(a), Elapsed(b)
    assert x == y and not (x != y)
    assert hash(x) == hash(y)
    assert len({x, y}) == 1


@given(st.floats(allow_nan=False))
def test_elapsed_is_not_equal_to_a_plain_float(a: float) -> None:
    assert Elapsed(a) != a and not (Elapsed(a) == a)
    assert float(Elapsed(a)) == a
