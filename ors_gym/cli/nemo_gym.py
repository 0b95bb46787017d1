"""``ors-gym nemo-gym``: NeMo Gym dataset rows for an ORS environment, and the server root.

``ors-gym nemo-gym dataset ENV --split SPLIT [--limit N] -o rows.jsonl`` writes one
NeMo Gym row per task (``ors_gym.nemo_gym.dataset_rows``); ``ors-gym nemo-gym root``
prints the folder NeMo Gym's launcher searches (``--search-dir``) for the
``OrsResourcesServer`` and its config. Both need nemo-gym (the ``nemo-gym`` extra, or
the venv of ``scripts/nemo-gym-venv.sh``), imported only when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ors_gym.cli.args import EXIT_OK, Subparsers, UsageError, int_type
from ors_gym.errors import OrsError

__all__ = ["add_parser"]


def add_parser(subparsers: Subparsers) -> None:
    """Add ``nemo-gym`` (and its ``dataset`` and ``root`` commands) to ``subparsers``."""
    parser = subparsers.add_parser(
        "nemo-gym",
        help="serve an ORS environment to NeMo Gym: its dataset rows, its server root",
        description=(
            "NeMo Gym rows for an ORS environment's tasks (dataset), and the folder NeMo "
            "Gym's launcher searches for the ORS resources server and its config (root)."
        ),
    )
    commands = parser.add_subparsers(dest="nemo_gym_command", metavar="COMMAND", required=True)
    dataset = commands.add_parser(
        "dataset",
        help="write one NeMo Gym row per task, as JSON Lines",
        description=(
            "Write one NeMo Gym row per task of a split: the task's messages as Responses "
            "input, its tools as Responses function tools (the terminal tool hidden), and "
            "the fields OrsResourcesServer's seed_session reopens the task from."
        ),
    )
    dataset.add_argument(
        "env", nargs="?", default="ors/Remote-v0", metavar="ENV",
        help="a registered id such as ors/Counter-v0 (default ors/Remote-v0, with --base-url)",
    )
    dataset.add_argument("--base-url", metavar="URL", help="the ORS server serving ENV")
    dataset.add_argument("--env-name", metavar="NAME",
                         help="the environment's name on that server")
    dataset.add_argument("--split", metavar="SPLIT",
                         help="the tasks' split (default: the environment's default split)")
    dataset.add_argument("--limit", type=int_type("--limit", 0), metavar="N",
                         help="the first N tasks only")
    dataset.add_argument("--agent", metavar="NAME",
                         help="the NeMo Gym agent each row names (its agent_ref)")
    dataset.add_argument("-o", "--out", required=True, metavar="FILE",
                         help="the JSON Lines file to write")
    dataset.set_defaults(handler=_dataset)
    root = commands.add_parser(
        "root",
        help="print the folder to pass to NeMo Gym's --search-dir",
        description=(
            "Print the folder holding resources_servers/ors (OrsResourcesServer's app.py and "
            "its config, configs/ors.yaml), for `gym env start --search-dir`."
        ),
    )
    root.set_defaults(handler=_root)


def _dataset(args: argparse.Namespace) -> int:
    import ors_gym  # noqa: F401 - registers the ors/... ids
    from ors_gym.nemo_gym import dataset_rows, write_rows

    where = {"base_url": args.base_url, "env_name": args.env_name}
    if args.env == "ors/Remote-v0" and args.base_url is None:
        raise UsageError("name the environment: a registered id such as ors/Counter-v0, or "
                         "--base-url URL (with --env-name NAME) for an ORS server")
    folder = Path(args.out).resolve().parent
    if not folder.is_dir():  # said before any task session opens
        raise UsageError(f"-o {args.out}: the folder {folder} does not exist; create it, or "
                         "name a file in a folder that exists")
    try:
        rows = dataset_rows(args.env, split=args.split, limit=args.limit, agent=args.agent,
                            **{k: v for k, v in where.items() if v is not None})
    except (ValueError, TypeError) as exc:
        if isinstance(exc, OrsError):
            raise
        raise UsageError(str(exc)) from exc
    count = write_rows(rows, args.out)
    print(f"wrote {count} rows to {args.out}", file=sys.stderr)
    return EXIT_OK


def _root(args: argparse.Namespace) -> int:
    from ors_gym.nemo_gym import root

    print(root())
    return EXIT_OK
