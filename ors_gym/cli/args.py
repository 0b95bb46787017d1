"""What every ``ors-gym`` subcommand shares: exit codes, the usage error, argparse types.

A subcommand module (``serve.py``, ``list.py``, ``train.py``) has an
``add_parser(subparsers)`` that builds its parser and sets ``handler`` to a
``(args) -> exit code`` function. A handler signals a mistake in the command
line by raising :class:`UsageError`; ``main`` prints it as one line on stderr
and exits with code 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "Handler",
    "Subparsers",
    "UsageError",
    "int_type",
]

Subparsers = Any  # argparse._SubParsersAction: private, so not named in annotations
Handler = Callable[[argparse.Namespace], int]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake in the command line; ``main`` prints it and exits with code 2."""


def int_type(what: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers from ``low`` to ``high`` (None: no limit)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            allowed = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{what} must be {allowed}, got {value}")
        return value

    return parse
