"""The ``ors-gym`` command line: ``serve``, ``list``, ``train``, ``eval``, ``view`` and ``gateway``.

Each subcommand lives in its own module (``serve.py``, ``list.py``,
``train.py``, ``eval.py``, ``view.py``) with an ``add_parser(subparsers)`` that
builds its parser and sets ``handler`` to a ``(args) -> exit code`` function; adding a subcommand
means writing one such module and appending its ``add_parser`` to
``SUBCOMMANDS``. The current folder is put on ``sys.path`` first, so a
``module:Class`` argument finds a package there. A handler signals a usage mistake by
raising :class:`UsageError` (exit code 2, one line on stderr); an infrastructure failure
(``OrsError``) or a missing extra is one line too, exit code 1; Ctrl-C is one line, exit
code 130. What the library logs at WARNING or above reaches stderr as
``ors-gym <command>: warning: ...`` lines. The libraries the
subcommands drive (:mod:`ors_gym.serving`, :mod:`ors_gym.train`, :mod:`ors_gym.eval`,
:mod:`ors_gym.viewer`) never import
this package.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ors_gym import __version__
from ors_gym.cli import eval as eval_command
from ors_gym.cli import gateway, harness, nemo_gym, serve, train, view
from ors_gym.cli import list as list_command
from ors_gym.cli._target import cwd_on_path
from ors_gym.cli.args import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Handler,
    Subparsers,
    UsageError,
    warnings_to_stderr,
)
from ors_gym.cli.serve import resolve_env_specs
from ors_gym.errors import OrsDependencyError, OrsError

__all__ = ["SUBCOMMANDS", "UsageError", "build_parser", "main", "resolve_env_specs"]

#: One function per subcommand; each adds its parser to the ``subparsers`` it is given.
SUBCOMMANDS: list[Callable[[Subparsers], None]] = [
    serve.add_parser,
    list_command.add_parser,
    train.add_parser,
    eval_command.add_parser,
    view.add_parser,
    gateway.add_parser,
    nemo_gym.add_parser,
    harness.add_parser,
]


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
    cwd_on_path()  # 'module:Class' arguments import from the current folder, as uvicorn's do
    try:
        with warnings_to_stderr(args.command):
            return handler(args)
    except UsageError as exc:
        print(f"ors-gym {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (OrsDependencyError, OrsError) as exc:  # a missing extra, an unreachable server...
        print(f"ors-gym {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback
        print(f"ors-gym {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
