"""``ors-gym eval``: run a chat model on an ORS environment and report (``ors_gym.eval``).

Writes ``trajectories.jsonl``, ``summary.json`` and ``report.html`` under
``--out`` (a folder holding an earlier run is refused, unless ``--overwrite``),
shows a progress bar on stderr and prints the summary table. Exits 1 when more
episodes than ``--max-errors`` (default: all but one) failed outside the model,
since their figures would describe the infrastructure, not the model.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ors_gym.cli._target import REMOTE_ANY, Target, add_env_arguments, resolve_target
from ors_gym.cli.args import EXIT_FAILURE, EXIT_OK, Subparsers, UsageError, int_type
from ors_gym.secret import Secret

__all__ = ["add_parser"]


def add_parser(subparsers: Subparsers) -> None:
    """Add ``eval`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a chat model (OpenAI-compatible endpoint) on an ORS environment",
        description=(
            "Run N episodes of a model behind an OpenAI-compatible chat-completions endpoint "
            "(tools in OpenAI's format; a plain answer goes to the terminal tool), K at once, "
            "and write the trajectories, summary.json and an HTML report. --model scripted "
            "runs the built-in ScriptedLLM with no endpoint."
        ),
    )
    positive = int_type("value", 1)
    parser.add_argument(
        "env_id", metavar="ENV", nargs="?", default=None,
        help="a registered gym id (ors/Math-v0), a 'module:Class' SDK environment (imported "
        "from the current folder), or nothing with --env-url (the server's environment)",
    )
    parser.add_argument("--model", required=True, help="model name, or 'scripted'")
    parser.add_argument("--base-url", default=None,
                        help="the endpoint's API root, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default=None,
                        help="API key (default: $OPENAI_API_KEY, else none)")
    parser.add_argument("--episodes", type=positive, default=10,
                        help="episodes (default: %(default)s)")
    parser.add_argument("--concurrency", type=positive, default=4,
                        help="episodes at once (default: %(default)s)")
    parser.add_argument("--split", default=None, help="task split (default: the env's default)")
    parser.add_argument("--out", default="runs/eval",
                        help="output directory (default: %(default)s); one that holds an "
                        "earlier run is refused unless --overwrite")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run already in --out")
    parser.add_argument("--max-turns", type=positive, default=20,
                        help="turns before an episode is truncated (default: %(default)s)")
    parser.add_argument("--max-retries", type=int_type("value", 0), default=2,
                        help="client retries per request (default: %(default)s)")
    parser.add_argument("--temperature", type=float, default=None, help="sampling temperature")
    parser.add_argument("--env-url", default=None,
                        help="an ORS server: runs ENV there, or without ENV the environment "
                        "it serves (--env-name picks one when it serves several)")
    add_env_arguments(parser)
    parser.add_argument(
        "--tool-format", default=None, metavar="FAMILY",
        help="read the model's reply text by this model family's rules (qwen3.5, glm-4.5, "
        "gpt-oss, kimi-k2, minimax-m2, gemma4, deepseek-v3.1, llama-3...), for an endpoint "
        "that returns the raw completion (default: Hermes-style <tool_call> JSON)",
    )
    parser.add_argument(
        "--max-errors", type=int_type("value", 0), default=None,
        help="exit 1 when more episodes than this failed outside the model (endpoint or "
        "environment unreachable...) (default: only when every episode did)",
    )
    hosted = parser.add_argument_group(
        "hosted environments", "a deployment on the OpenReward platform (key: "
        "$OPENREWARD_API_KEY), in place of ENV")
    hosted.add_argument("--deployment", metavar="NAMESPACE/NAME", default=None,
                        help="run this hosted deployment (leave ENV out)")
    hosted.add_argument("--variant", default=None,
                        help="with --deployment: one environment class inside it")
    hosted.add_argument("--secret", metavar="NAME", action="append", default=[],
                        help="pass the secret NAME to every session, its value read from the "
                        "environment variable NAME (repeat for several)")
    hosted.add_argument("--env-override", metavar="NAME[=VALUE]", action="append", default=[],
                        help="set the environment variable NAME of every session (e.g. "
                        "OPENAI_BASE_URL=http://trainer:8000/v1, for the environment's own "
                        "model calls; repeat for several); NAME alone takes the value of "
                        "this process's environment variable NAME, which keeps it out of "
                        "the command line (and ps)")
    hosted.add_argument("--check-secrets", action="store_true",
                        help="before any session, ask the platform which secrets the "
                        "deployment needs and stop naming those not given")
    parser.add_argument(
        "--upload", metavar="RUN", default=None,
        help="upload each scored episode to the OpenReward platform's rollout log as run RUN, "
        "in the background (key: $OPENREWARD_API_KEY; API host: $OPENREWARD_API_URL, else "
        "api. + $OPENREWARD_URL)",
    )
    parser.add_argument("--no-progress-bar", action="store_true", help="hide the progress bar")
    parser.set_defaults(handler=_run)


def _target(args: argparse.Namespace) -> Target:
    """The environment: ENV or ``--env-url`` as usual, or ``--deployment``, with the
    hosted options as env options."""
    if args.deployment is None:
        if args.variant or args.secret or args.env_override or args.check_secrets:
            raise UsageError("--variant, --secret, --env-override and --check-secrets go "
                             "with --deployment NAMESPACE/NAME")
        return resolve_target(args.env_id, args.env_url, args.env_name)
    if args.env_id is not None or args.env_url is not None:
        raise UsageError("--deployment names the environment: leave ENV and --env-url out")
    options: dict[str, Any] = {"deployment": args.deployment}
    if args.variant:
        options["variant"] = args.variant
    if args.secret:
        missing = [name for name in args.secret if not os.environ.get(name)]
        if missing:
            raise UsageError(f"--secret {missing[0]}: the environment variable {missing[0]} "
                             "is not set; export it first")
        options["secrets"] = {name: Secret(os.environ[name]) for name in args.secret}
    overrides = {}
    for item in args.env_override:
        name, sep, value = item.partition("=")
        if not name:
            raise UsageError("--env-override: give NAME=VALUE, or NAME to read the value "
                             "from the environment variable NAME")
        if not sep:
            if name not in os.environ:
                raise UsageError(f"--env-override {name}: the environment variable {name} is "
                                 "not set; export it first, or give NAME=VALUE")
            value = os.environ[name]
        overrides[name] = Secret(value)
    if overrides:
        options["env_overrides"] = overrides
    if args.check_secrets:
        options["check_secrets"] = True
    return Target(REMOTE_ANY, options)


def _run(args: argparse.Namespace) -> int:
    from ors_gym.eval import SCRIPTED, evaluate, format_summary
    from ors_gym.eval.summary import OUTSIDE_THE_MODEL
    from ors_gym.families import check_tool_format

    if args.model != SCRIPTED and args.base_url is None:
        raise UsageError(f"--model {args.model} needs --base-url (or use --model scripted)")
    target = _target(args)
    env_options = dict(target.options or {})
    if args.tool_format is not None:
        try:
            check_tool_format(args.tool_format)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"--tool-format: {exc}") from exc
        env_options["tool_format"] = args.tool_format
    uploader = None
    if args.upload is not None:
        from ors_gym.platform import RolloutUploader

        try:
            uploader = RolloutUploader(args.upload, run_info={"model_name": args.model,
                                                              "run_type": "eval"})
        except ValueError as exc:
            raise UsageError(f"--upload: {exc}") from exc
    try:
        summary = evaluate(
            target.env_id, args.model, args.base_url, episodes=args.episodes,
            concurrency=args.concurrency, split=args.split, out=args.out,
            max_turns=args.max_turns, api_key=args.api_key, max_retries=args.max_retries,
            temperature=args.temperature, env_options=env_options or None,
            progress=not args.no_progress_bar, overwrite=args.overwrite, upload=uploader,
        )
    except (ValueError, FileExistsError) as exc:
        raise UsageError(str(exc).replace("overwrite=True (ors-gym eval: --overwrite)",
                                          "--overwrite")) from exc
    print(format_summary(summary))
    print(f"trajectories: {summary['trajectories']}")
    print(f"summary: {summary['summary_path']}")
    print(f"report: {summary['report']}")
    if uploader is not None:
        uploader.close()
        lost = ", ".join([f"{uploader.failed} not sent"] * bool(uploader.failed)
                         + [f"{uploader.dropped} rollouts dropped"] * bool(uploader.dropped))
        print(f"uploaded: {uploader.sent} rollout events of run {args.upload!r} to "
              f"{uploader.location}" + (f" ({lost})" if lost else ""))
    failed, episodes = summary["failed_episodes"], summary["episodes"]
    allowed = episodes - 1 if args.max_errors is None else args.max_errors
    if failed > allowed:
        reasons = ", ".join(f"{k}: {v}" for k, v in summary["errors"].items()
                            if k.startswith(OUTSIDE_THE_MODEL))
        limit = f", more than --max-errors {args.max_errors}" if args.max_errors is not None else ""
        print(
            f"ors-gym eval: error: {failed} of {episodes} episodes failed outside the model "
            f"({reasons}){limit}; they are not scored. Check "
            "--base-url and the environment's server",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return EXIT_OK
