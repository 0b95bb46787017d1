"""What every ``ors-gym`` subcommand shares: exit codes, the usage error, argparse types.

A subcommand module (``serve.py``, ``list.py``, ``train.py``) has an
``add_parser(subparsers)`` that builds its parser and sets ``handler`` to a
``(args) -> exit code`` function. A handler signals a mistake in the command
line by raising :class:`UsageError`; ``main`` prints it as one line on stderr
and exits with code 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "Handler",
    "Subparsers",
    "UsageError",
    "int_type",
    "warnings_to_stderr",
]

Subparsers = Any  # argparse._SubParsersAction: private, so not named in annotations
Handler = Callable[[argparse.Namespace], int]

# Every exit code of ``ors-gym``; docs/reference/cli.md lists each (a test checks it).
EXIT_OK = 0
#: Infrastructure trouble (a server unreachable, a missing extra); eval: too many episodes
#: failed outside the model.
EXIT_FAILURE = 1
#: A mistake in the command line.
EXIT_USAGE = 2
#: ``serve`` could not listen on ``--host``/``--port`` (uvicorn's startup-failure code).
EXIT_UNAVAILABLE = 3
#: Stopped by Ctrl-C (SIGINT) before finishing: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130


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


class _StderrHandler(logging.Handler):
    """One ``ors-gym <command>: warning: ...`` line on stderr per record, written through
    tqdm when a progress bar may be on screen, so that the bar is redrawn below it."""

    def __init__(self, command: str) -> None:
        super().__init__(logging.WARNING)
        self.command = command

    def emit(self, record: logging.LogRecord) -> None:
        level = "error" if record.levelno >= logging.ERROR else "warning"
        line = f"ors-gym {self.command}: {level}: {record.getMessage()}"
        tqdm = sys.modules.get("tqdm")
        try:
            if tqdm is not None:
                tqdm.tqdm.write(line, file=sys.stderr)
            else:
                print(line, file=sys.stderr)
        except Exception:  # a closed stderr: nothing more to do
            self.handleError(record)


@contextmanager
def warnings_to_stderr(command: str) -> Iterator[None]:
    """While a subcommand runs, what ``ors_gym`` logs at WARNING or above is printed on stderr
    (the library itself installs no handler, so without this only Python's last-resort
    handler would show it, and a handler another library adds would hide it)."""
    logger = logging.getLogger("ors_gym")
    handler = _StderrHandler(command)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
