"""``ors-gym serve``: serve bundled or custom SDK environments over HTTP."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ors_gym.cli.args import EXIT_OK, EXIT_UNAVAILABLE, Subparsers, UsageError, int_type
from ors_gym.envs import BUNDLED, DEFAULT_ENV, resolve_bundled

__all__ = ["add_parser", "bundled_in_default_order", "guard_shell", "resolve_env_specs"]

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def bundled_in_default_order() -> list[str]:
    """Bundled class names, the default environment first."""
    return [DEFAULT_ENV, *(name for name in BUNDLED if name != DEFAULT_ENV)]


def resolve_env_specs(names: Sequence[str]) -> list[str]:
    """Map CLI environment names to ``module:Class`` specs, in order, without duplicates.

    A name is a bundled environment (case-insensitive, e.g. ``gridworld``) or a
    ``module:Class`` spec. No names means every bundled environment, the
    default (GridWorld) first.
    """
    if not names:
        return [BUNDLED[name] for name in bundled_in_default_order()]
    specs: list[str] = []
    for name in names:
        spec = name if ":" in name else resolve_bundled(name)
        if spec is None:
            known = ", ".join(bundled_in_default_order())
            raise UsageError(
                f"unknown environment {name!r}: use a bundled one ({known}; any case) "
                "or a 'module:Class' spec such as 'my_package.envs:MyEnv'"
            )
        if spec not in specs:
            specs.append(spec)
    return specs


def guard_shell(specs: list[str], host: str, *, named: bool, allow_shell: bool) -> list[str]:
    """``specs`` safe to serve on ``host``: the Sandbox env runs shell commands sent to it.

    On a loopback address, or with ``--allow-shell``, everything is served. Elsewhere
    a default list leaves Sandbox out (with a note), and naming it is refused.
    """
    shell = BUNDLED.get("Sandbox")
    if shell not in specs or host in _LOOPBACK or host.startswith("127.") or allow_shell:
        return specs
    if named:
        raise UsageError(
            f"Sandbox runs the shell commands it is sent, as this user; serving it on {host} "
            "lets anyone who reaches that address run them. Serve it on 127.0.0.1, or pass "
            "--allow-shell if that is what you want"
        )
    print(f"ors-gym: Sandbox left out on {host} (it runs shell commands; --allow-shell "
          "serves it anyway)", file=sys.stderr)
    return [spec for spec in specs if spec != shell]


def add_parser(subparsers: Subparsers) -> None:
    """Add ``serve`` to ``subparsers``."""
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
        "--port",
        type=int_type("port", 0, 65535),
        default=8080,
        help="port to bind; 0 picks a free one (default 8080)",
    )
    parser.add_argument(
        "--allow-shell",
        action="store_true",
        help="serve the Sandbox env (it runs shell commands) on a non-loopback --host too",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from ors_gym.serving import load_environment_classes, serve_forever

    specs = guard_shell(resolve_env_specs(args.envs), args.host, named=bool(args.envs),
                        allow_shell=args.allow_shell)
    try:
        classes = load_environment_classes(specs)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    try:
        serve_forever(classes, host=args.host, port=args.port)
    except SystemExit as exc:  # uvicorn exits when it cannot bind
        if exc.code in (0, None):
            return EXIT_OK
        print(
            f"ors-gym: could not serve on {args.host}:{args.port} (see the error above); "
            "pick another --port, or --port 0 for a free one",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        pass
    return EXIT_OK
