"""Which environment a command runs: a registered id, a ``module:Class``, or a served one.

``ors-gym eval`` and ``ors-gym train`` share this. ENV may be

- a registered gym id (``ors/Math-v0``; ``--env-url`` then runs it on that server);
- a ``module:Class`` SDK environment, imported from the current folder first (as
  ``uvicorn`` and ``ors-gym serve`` do) and given an id by :func:`register_class`;
- left out (or ``ors/Remote-v0``) with ``--env-url URL``: the server's environment,
  the only one it serves or the one ``--env-name`` names, with :func:`register_server`'s id.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from ors_gym.cli.args import UsageError
from ors_gym.errors import redact_url

__all__ = ["Target", "add_env_arguments", "cwd_on_path", "resolve_target"]

REMOTE_ANY = "ors/Remote-v0"
FORMS = (
    "a registered id (ors-gym list shows them), a 'module:Class' SDK environment "
    "(imported from the current folder), or --env-url URL for a served one"
)


@dataclass
class Target:
    """The gym id to run and the env options that override its registered kwargs."""

    env_id: str
    options: dict[str, Any] = field(default_factory=dict)


def cwd_on_path() -> None:
    """Put the current folder first on ``sys.path``, so ``mylab.quiz:Quiz`` imports from it."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """``--env-name``, as ``eval`` and ``train`` take it beside their ``--env-url``."""
    parser.add_argument(
        "--env-name", default=None,
        help="with --env-url: which of the server's environments (needed when it serves several)",
    )


def _is_class_spec(env: str) -> bool:
    module, sep, attr = env.partition(":")
    return bool(sep) and "/" not in env and bool(module) and bool(attr)


def resolve_target(
    env: str | None, env_url: str | None, env_name: str | None, *, default: str | None = None
) -> Target:
    """The :class:`Target` the command line names, or a :class:`UsageError` saying why not.

    ``default`` (``train``'s GridWorld) is used when ENV is left out; with ``--env-url``
    it is the server's environment of that name when the server serves several.
    """
    import ors_gym  # noqa: F401 - registers the ors/... ids

    if env is not None and env not in gym.registry and _is_class_spec(env):
        if env_url is not None:
            raise UsageError(
                f"{env} runs in this process; drop --env-url, or serve it "
                f"(ors-gym serve {env}) and pass only --env-url"
            )
        return Target(_register_spec(env))
    if env_url is not None and (env is None or env == REMOTE_ANY):
        return Target(_served(env_url, env_name, default))
    if env is None:
        if default is None:
            raise UsageError(f"which environment? Give ENV: {FORMS}")
        env = default
    if env not in gym.registry:
        raise UsageError(f"unknown environment {env!r}: give {FORMS}")
    options: dict[str, Any] = {}
    if env_url is not None:
        options["base_url"] = env_url
    if env_name is not None:
        if env_url is None and "base_url" not in gym.spec(env).kwargs:
            raise UsageError("--env-name picks one of a server's environments: add --env-url")
        options["env_name"] = env_name
    return Target(env, options)


def _register_spec(spec: str) -> str:
    from ors_gym.registration import register_class
    from ors_gym.serving import load_environment_classes

    cwd_on_path()
    try:
        (cls,) = load_environment_classes([spec])
        return register_class(cls)
    except (ValueError, TypeError) as exc:
        raise UsageError(
            f"{exc} (a module is imported from the current folder or the installed packages)"
        ) from exc


def _served(url: str, env_name: str | None, default: str | None) -> str:
    """Register the server's environments; the id of the one to run."""
    from ors_gym.registration import register_server, remote_id

    ids = register_server(url)
    if env_name is not None:
        wanted = remote_id(env_name)
        if wanted not in ids:
            raise UsageError(
                f"the server at {redact_url(url)} serves no {env_name!r}; it serves "
                f"{_names(ids)}"
            )
        return wanted
    if len(ids) == 1:
        return ids[0]
    if default is not None:
        by_default = remote_id(gym.spec(default).name)
        if by_default in ids:
            return by_default
    raise UsageError(
        f"the server at {redact_url(url)} serves {_names(ids)}: pick one with --env-name"
        if ids else f"the server at {redact_url(url)} serves no environment"
    )


def _names(ids: list[str]) -> str:
    return ", ".join(gym.spec(i).kwargs.get("env_name", i) for i in ids)
