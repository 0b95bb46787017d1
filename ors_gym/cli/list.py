"""``ors-gym list``: the bundled environments, their gym ids and ``module:Class`` specs."""

from __future__ import annotations

import argparse

from ors_gym.cli.args import EXIT_OK, Subparsers
from ors_gym.cli.serve import bundled_in_default_order
from ors_gym.envs import BUNDLED, DEFAULT_ENV

__all__ = ["add_parser"]


def add_parser(subparsers: Subparsers) -> None:
    """Add ``list`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "list",
        help="list the bundled environments",
        description="List the bundled environments: name, gym id and 'module:Class' spec.",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    names = bundled_in_default_order()
    labels = [f"{n} (default)" if n == DEFAULT_ENV else n for n in names]
    ids = [f"ors/{n}-v0" for n in names]
    label_w, id_w = max(map(len, labels)), max(map(len, ids))
    for name, label, gym_id in zip(names, labels, ids, strict=True):
        print(f"{label:<{label_w}}  {gym_id:<{id_w}}  {BUNDLED[name]}")
    return EXIT_OK
