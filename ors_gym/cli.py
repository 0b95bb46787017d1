"""The ``ors-gym`` command line: ``serve`` bundled or custom environments, ``list`` them.

Each subcommand is one ``_add_<name>(subparsers)`` function that builds its
parser and sets ``handler`` to a ``(args) -> exit code`` function; adding a
subcommand means writing one such function and appending it to
``SUBCOMMANDS``. A handler signals a usage mistake by raising ``UsageError``
(exit code 2, message on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ors_gym import __version__
from ors_gym.envs import BUNDLED, DEFAULT_ENV, resolve_bundled
from ors_gym.errors import OrsDependencyError

__all__ = ["SUBCOMMANDS", "UsageError", "build_parser", "main", "resolve_env_specs"]

Subparsers = Any  # argparse._SubParsersAction: private, so not named in annotations
Handler = Callable[[argparse.Namespace], int]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake in the command line; ``main`` prints it and exits with code 2."""


def _bundled_in_default_order() -> list[str]:
    """Bundled class names, the default environment first."""
    return [DEFAULT_ENV, *(name for name in BUNDLED if name != DEFAULT_ENV)]


def resolve_env_specs(names: Sequence[str]) -> list[str]:
    """Map CLI environment names to ``module:Class`` specs, in order, without duplicates.

    A name is a bundled environment (case-insensitive, e.g. ``gridworld``) or a
    ``module:Class`` spec. No names means every bundled environment, the
    default (GridWorld) first.
    """
    if not names:
        return [BUNDLED[name] for name in _bundled_in_default_order()]
    specs: list[str] = []
    for name in names:
        spec = name if ":" in name else resolve_bundled(name)
        if spec is None:
            known = ", ".join(_bundled_in_default_order())
            raise UsageError(
                f"unknown environment {name!r}: use a bundled one ({known}; any case) "
                "or a 'module:Class' spec such as 'my_package.envs:MyEnv'"
            )
        if spec not in specs:
            specs.append(spec)
    return specs


def _port(text: str) -> int:
    """argparse type for a TCP port (0 picks a free one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be an integer, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be from 0 to 65535, got {port}")
    return port


# --- serve ------------------------------------------------------------------------------


def _add_serve(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve ORS environments over HTTP (the SDK server under uvicorn)",
        description=(
            "Serve ORS environments over HTTP until interrupted. ENV is a bundled "
            "environment name (case-insensitive) or a 'module:Class' spec; the first is "
            f"the server's default. Without ENV, every bundled environment is served, "
            f"{DEFAULT_ENV} first."
        ),
    )
    parser.add_argument("envs", nargs="*", metavar="ENV", help="environments to serve")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=_port, default=8080, help="port to bind; 0 picks a free one (default 8080)"
    )
    parser.set_defaults(handler=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from ors_gym.serving import load_environment_classes, serve_forever

    specs = resolve_env_specs(args.envs)
    try:
        classes = load_environment_classes(specs)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    try:
        serve_forever(classes, host=args.host, port=args.port)
    except SystemExit as exc:  # uvicorn exits when it cannot bind
        code = exc.code if isinstance(exc.code, int) else EXIT_FAILURE
        if code:
            print(
                f"ors-gym: could not serve on {args.host}:{args.port} (see the error above); "
                "pick another --port, or --port 0 for a free one",
                file=sys.stderr,
            )
        return code
    except KeyboardInterrupt:
        pass
    return EXIT_OK


# --- list -------------------------------------------------------------------------------


def _add_list(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "list",
        help="list the bundled environments",
        description="List the bundled environments: name, gym id and 'module:Class' spec.",
    )
    parser.set_defaults(handler=_run_list)


def _run_list(args: argparse.Namespace) -> int:
    names = _bundled_in_default_order()
    labels = [f"{n} (default)" if n == DEFAULT_ENV else n for n in names]
    ids = [f"ors/{n}-v0" for n in names]
    label_w, id_w = max(map(len, labels)), max(map(len, ids))
    for name, label, gym_id in zip(names, labels, ids, strict=True):
        print(f"{label:<{label_w}}  {gym_id:<{id_w}}  {BUNDLED[name]}")
    return EXIT_OK


# --- entry point ------------------------------------------------------------------------

#: One function per subcommand; each adds its parser to the ``subparsers`` it is given.
def _add_train(subparsers: Subparsers) -> None:
    from ors_gym.train import add_parser

    add_parser(subparsers)


SUBCOMMANDS: list[Callable[[Subparsers], None]] = [_add_serve, _add_list, _add_train]


def build_parser() -> argparse.ArgumentParser:
    """The ``ors-gym`` parser with every subcommand in ``SUBCOMMANDS``."""
    parser = argparse.ArgumentParser(
        prog="ors-gym",
        description="Open Reward Standard environments as Gymnasium environments.",
    )
    parser.add_argument("--version", action="version", version=f"ors-gym {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ors-gym`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or an argparse usage error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    handler: Handler = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        print(f"ors-gym {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OrsDependencyError as exc:
        print(f"ors-gym {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
