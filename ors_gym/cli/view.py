"""``ors-gym view``: a trajectories file as one self-contained HTML report."""

from __future__ import annotations

import argparse

from ors_gym.cli.args import EXIT_OK, Subparsers, UsageError

__all__ = ["add_parser"]


def add_parser(subparsers: Subparsers) -> None:
    """Add ``view`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "view",
        help="write an HTML report of a trajectories file",
        description=(
            "Write one self-contained HTML file (no network, no server) showing every episode "
            "of a trajectories file as a transcript, with a summary table, sorting by reward "
            "and a filter for episodes with errors."
        ),
    )
    parser.add_argument("path", metavar="PATH.jsonl", help="a RecordTrajectories file")
    parser.add_argument("-o", "--output", default=None,
                        help="the HTML file (default: PATH with .html)")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from ors_gym.viewer import write_report

    try:
        target = write_report(args.path, args.output)
    except FileNotFoundError as exc:
        raise UsageError(f"no such file: {exc.filename}") from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    print(f"report: {target}")
    return EXIT_OK
