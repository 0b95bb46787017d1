"""``ors-gym harness``: play an agent harness on N episodes of an ORS environment.

The harness's model is a capture gateway started here (the ``gateway`` command's
backend options: vLLM, SGLang or a local transformers model), its tools the episode's
ORS session over MCP; each episode's result (the trajectory with its ORS return, the
stop reason, the exit status, the calls, the output) is one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from typing import IO, Any

from ors_gym.cli.args import EXIT_FAILURE, EXIT_OK, Subparsers, UsageError, int_type
from ors_gym.cli.gateway import add_model_arguments

__all__ = ["PRESETS", "add_parser", "make_harness"]

#: ``ors_gym.harness.PRESETS``, named here so that building the parser imports no model code.
PRESETS = ("claude-code", "codex", "openai-agents", "pydantic-ai", "smolagents")


def add_parser(subparsers: Subparsers) -> None:
    """Add ``harness`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "harness",
        help="play an agent harness (Claude Code, Codex, an SDK agent, any command) on ORS "
             "episodes and write their token-exact trajectories as JSON lines",
        description=(
            "Each episode: the environment's session is served over MCP, a capture session "
            "is opened on a gateway started here, and the harness is started with the "
            "task's prompt, the model endpoint and the MCP server; its trajectory, ORS "
            "return and stop reason are written as one JSON line."
        ),
    )
    parser.add_argument("env", nargs="?", default=None,
                        help="a registered id (ors/Counter-v0) or a 'module:Class' SDK "
                             "environment; leave out with --env-url or --deployment")
    parser.add_argument("--env-url", default=None, help="an ORS server's address")
    parser.add_argument("--env-name", default=None,
                        help="with --env-url: which of the server's environments")
    parser.add_argument("--deployment", default=None, metavar="NAMESPACE/NAME",
                        help="a hosted OpenReward environment")
    parser.add_argument("--split", default=None,
                        help="the tasks' split; episode i plays task --first-index + i "
                             "(default: a task drawn per episode)")
    parser.add_argument("--first-index", type=int_type("--first-index", 0), default=0)
    parser.add_argument("--seed", type=int, default=None, help="episode i is reset with seed+i")
    harness = parser.add_mutually_exclusive_group(required=True)
    harness.add_argument("--preset", choices=PRESETS, help="a well-known harness")
    harness.add_argument("--command", default=None,
                         help="a harness command line (a template: {prompt}, {mcp_config}, "
                              "{mcp_url}, {model}, ... see the harness guide)")
    parser.add_argument("--prompt-via", choices=("arg", "stdin", "file"), default="arg",
                        help="with --command: how it takes the prompt (default arg)")
    parser.add_argument("--mcp-config", choices=("json", "toml"), default="json",
                        help="with --command: the MCP configuration's form (default json)")
    parser.add_argument("--transport", choices=("http", "stdio"), default="http",
                        help="with --command: the MCP server by URL or as a stdio command")
    parser.add_argument("--python", default="python",
                        help="the interpreter of a Python SDK preset (its venv's python)")
    parser.add_argument("--executable", default=None,
                        help="Claude Code's or Codex's command (default claude, codex)")
    parser.add_argument("-n", "--episodes", type=int_type("--episodes", 1), default=1)
    parser.add_argument("--concurrency", type=int_type("--concurrency", 1), default=None,
                        help="episodes at once (default: all)")
    parser.add_argument("--deadline", type=float, default=600.0,
                        help="seconds a harness may run (default 600)")
    parser.add_argument("--out", default="-", help="the JSON lines' file (default: stdout)")
    add_model_arguments(parser)  # the model endpoint: the gateway command's options
    parser.set_defaults(handler=_run)


def make_harness(args: argparse.Namespace) -> Any:
    """The :class:`~ors_gym.harness.Harness` the arguments name."""
    from ors_gym.harness import Harness, preset

    if args.preset:
        return preset(args.preset, python=args.python, executable=args.executable)
    try:
        return Harness(name="command", command=tuple(shlex.split(args.command)),
                       prompt_via=args.prompt_via, mcp_config=args.mcp_config,
                       transport=args.transport)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _env_factory(args: argparse.Namespace) -> Any:
    from ors_gym import AsyncOrsEnv

    if args.env_url or args.deployment:
        if args.env:
            raise UsageError("give ENV or --env-url/--deployment, not both")
        return lambda i: AsyncOrsEnv(base_url=args.env_url, env_name=args.env_name,
                                     deployment=args.deployment)
    if not args.env:
        raise UsageError("name the environment: a registered id (ors/Counter-v0), a "
                         "'module:Class', --env-url URL or --deployment NAMESPACE/NAME")
    env_class: Any = args.env
    if ":" not in args.env or "/" in args.env:
        import gymnasium as gym

        import ors_gym  # noqa: F401  (registers the ors/ ids)

        try:
            kwargs = dict(gym.spec(args.env).kwargs)
        except gym.error.Error as exc:
            raise UsageError(f"{args.env!r} is not a registered environment ({exc}); "
                             "ors-gym list shows them") from exc
        env_class = kwargs.pop("env_class", None)
        if env_class is None:
            raise UsageError(f"{args.env} is not an SDK environment this command can host; "
                             "serve it and pass --env-url")
    return lambda i: AsyncOrsEnv(env_class=env_class)


def _run(args: argparse.Namespace) -> int:
    if not args.deadline > 0:
        raise UsageError(f"--deadline must be a positive number of seconds, got {args.deadline}")
    if args.preset is None and args.command is not None and not args.command.strip():
        raise UsageError("--command is empty")
    harness = make_harness(args)
    make_env = _env_factory(args)
    from ors_gym.cli.gateway import build_gateway
    from ors_gym.gateway import GatewayThread

    out = _open_out(args.out)  # before the model loads: a bad path fails at once
    try:
        gateway = build_gateway(args)
        with GatewayThread(gateway):
            episodes = asyncio.run(_play(args, gateway, harness, make_env, out))
    finally:
        if out is not sys.stdout:
            out.close()
    return EXIT_OK if all(e.stop != "harness_failed" for e in episodes) else EXIT_FAILURE


def _open_out(path: str) -> IO[str]:
    if path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write there ({exc.strerror}); name a file "
                         "in a folder that exists, or - for stdout") from exc


async def _play(args: argparse.Namespace, gateway: Any, harness: Any, make_env: Any,
                out: IO[str]) -> list[Any]:
    from ors_gym.harness import HarnessRunner, run_batch

    def options(i: int) -> dict[str, Any] | None:
        return None if args.split is None else {"split": args.split,
                                                "index": args.first_index + i}

    def progress(done: int, n: int, episode: Any) -> None:
        out.write(json.dumps(episode.to_json()) + "\n")
        out.flush()
        print(f"ors-gym harness: {done}/{n} {episode.stop}, reward {episode.reward:g}",
              file=sys.stderr, flush=True)

    async with HarnessRunner(gateway) as runner:
        return await run_batch(runner, harness, make_env, args.episodes, options=options,
                               seed=args.seed, concurrency=args.concurrency,
                               deadline=args.deadline, progress=progress)
