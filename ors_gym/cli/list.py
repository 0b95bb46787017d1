"""``ors-gym list``: every ORS gym id, where it runs, and what it runs.

One line per id: the bundled ``ors/<Class>-v0`` (in-process, with their
``module:Class`` spec), ``ors/Remote-v0`` (any server, chosen at
``gym.make``) and, for each ``--server URL``, the ``ors-remote/<Name>-v0`` ids
:func:`ors_gym.register_server` gives that server's environments.
"""

from __future__ import annotations

import argparse

import gymnasium as gym

from ors_gym.cli.args import EXIT_OK, Subparsers, UsageError
from ors_gym.cli.serve import bundled_in_default_order
from ors_gym.envs import BUNDLED, DEFAULT_ENV
from ors_gym.errors import OrsError, redact_url

__all__ = ["add_parser", "rows"]


def add_parser(subparsers: Subparsers) -> None:
    """Add ``list`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "list",
        help="list the ORS gym ids and where each runs",
        description=(
            "List the ORS gym ids: each id, where it runs (in-process or a server URL) and "
            "what it runs (the bundled 'module:Class' spec, or the server's environment name). "
            "--server adds the ids register_server gives a running server's environments."
        ),
    )
    parser.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="URL",
        help="also list the environments of the ORS server at URL (repeatable)",
    )
    parser.set_defaults(handler=_run)


def rows(servers: list[str] | None = None) -> list[tuple[str, str, str]]:
    """``(id, where it runs, what it runs)`` for each ORS id, bundled ones first (default
    first), then ``ors/Remote-v0``, then each server's ids (registering them)."""
    from ors_gym.registration import NAMESPACE, register_server

    out = [
        (
            f"{NAMESPACE}/{name}-v0",
            "in-process",
            BUNDLED[name] + (" (default)" if name == DEFAULT_ENV else ""),
        )
        for name in bundled_in_default_order()
    ]
    out.append(
        (f"{NAMESPACE}/Remote-v0", "any server", "gym.make(id, base_url=URL, env_name=NAME)")
    )
    for url in servers or []:
        for env_id in register_server(url):
            env_name = gym.spec(env_id).kwargs["env_name"]
            out.append((env_id, str(redact_url(url)), str(env_name)))
    return out


def _run(args: argparse.Namespace) -> int:
    import ors_gym  # noqa: F401 - registers the ors/... ids

    try:
        table = rows(args.server)
    except (OrsError, ValueError) as exc:  # unreachable, or not an http(s) URL
        raise UsageError(f"cannot list the environments of --server: {exc}") from exc
    id_w, where_w = (max(len(row[i]) for row in table) for i in (0, 1))
    for env_id, where, what in table:
        print(f"{env_id:<{id_w}}  {where:<{where_w}}  {what}")
    return EXIT_OK
