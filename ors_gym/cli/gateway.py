"""``ors-gym gateway``: a capture gateway in front of a token-in/token-out backend."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ors_gym.cli.args import EXIT_OK, EXIT_UNAVAILABLE, Subparsers, UsageError, int_type

__all__ = ["add_parser", "build_gateway"]


def add_parser(subparsers: Subparsers) -> None:
    """Add ``gateway`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "gateway",
        help="serve a model endpoint that captures the exact sampled tokens per session",
        description=(
            "Serve OpenAI Chat Completions and Anthropic Messages per capture session "
            "(/s/SID/v1/..., or the session's API key), rendering each request with the "
            "tokenizer's model family and sampling from a vLLM or SGLang server (the prompt "
            "as ids) or a local transformers model. Sessions are opened, read and closed "
            "with POST /sessions, GET /sessions/SID, POST /sessions/SID/close."
        ),
    )
    add_model_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int_type("port", 0, 65535), default=8000,
                        help="port to bind; 0 picks a free one (default 8000)")
    parser.add_argument("--public-url", default=None,
                        help="the address agents reach the gateway at, if not the bound one")
    parser.add_argument("--admin-key-env", default=None, metavar="VAR",
                        help="protect the session API with the key in environment variable VAR")
    parser.set_defaults(handler=_run)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model endpoint's options (tokenizer, backend, limits), which ``harness``
    shares: :func:`build_gateway` reads them."""
    parser.add_argument("--tokenizer", required=True,
                        help="the model's tokenizer: a hub name or a local folder")
    parser.add_argument("--processor", default=None,
                        help="a vision-language model's processor (a hub name or a local "
                             "folder), for its family's renderer")
    parser.add_argument("--backend", choices=("vllm", "sglang", "transformers"), default="vllm",
                        help="where completions are sampled (default vllm)")
    parser.add_argument("--backend-url", default=None,
                        help="the vLLM or SGLang server, e.g. http://127.0.0.1:8001")
    parser.add_argument("--model", default=None,
                        help="the model: vLLM's served name, or the transformers checkpoint "
                             "(default: --tokenizer)")
    parser.add_argument("--renderer", default=None,
                        help="a model family or renderers name (default: found from the "
                             "tokenizer), or 'template'")
    parser.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                        help="keyword arguments for the chat template, e.g. "
                             "'{\"enable_thinking\": false}'")
    parser.add_argument("--max-in-flight", type=int_type("--max-in-flight", 1), default=64,
                        help="backend requests at once (default 64)")
    parser.add_argument("--context-length", type=int_type("--context-length", 1), default=None,
                        help="refuse longer prompts (default: the tokenizer's model_max_length)")
    parser.add_argument("--max-tokens", type=int_type("--max-tokens", 1), default=4096,
                        help="a turn's token budget when a request gives none (default 4096)")


def build_gateway(args: argparse.Namespace) -> Any:
    """The :class:`~ors_gym.gateway.Gateway` the arguments describe (loads the tokenizer)."""
    try:
        from transformers import AutoTokenizer

        from ors_gym.gateway import Gateway
    except ImportError as exc:
        raise UsageError(f"ors-gym gateway needs the gateway extra ({exc}): "
                         "pip install 'ors-gym[gateway]'") from exc
    kwargs = None
    if args.chat_template_kwargs:
        try:
            kwargs = json.loads(args.chat_template_kwargs)
        except ValueError as exc:
            raise UsageError(f"--chat-template-kwargs is not JSON: {exc}") from exc
        if not isinstance(kwargs, dict):
            raise UsageError("--chat-template-kwargs must be a JSON object")
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    processor = _processor(args.processor) if args.processor else None
    model = args.model or args.tokenizer
    try:
        return Gateway(tokenizer, _sampler(args, tokenizer, model), renderer=args.renderer,
                       chat_template_kwargs=kwargs, model=model,
                       max_in_flight=args.max_in_flight, context_length=args.context_length,
                       max_tokens=args.max_tokens, processor=processor)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from exc


def _processor(name: str) -> Any:
    """``--processor``: transformers' ``AutoProcessor`` for ``name``."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(name)
    except (OSError, ValueError, ImportError) as exc:
        raise UsageError(f"--processor {name}: no processor could be loaded from it "
                         f"({type(exc).__name__}: {exc})") from exc


def _sampler(args: argparse.Namespace, tokenizer: Any, model: str) -> Any:
    if args.backend == "transformers":
        from transformers import AutoModelForCausalLM

        from ors_gym.sampling import TransformersSampler

        return TransformersSampler(AutoModelForCausalLM.from_pretrained(model), tokenizer)
    if not args.backend_url:
        raise UsageError(f"--backend {args.backend} needs --backend-url (the server's address, "
                         "e.g. http://127.0.0.1:8001)")
    from ors_gym.sampling import SglangGenerate, VllmCompletions

    try:
        if args.backend == "vllm":
            return VllmCompletions(args.backend_url, model, max_in_flight=args.max_in_flight)
        return SglangGenerate(args.backend_url, max_in_flight=args.max_in_flight)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _run(args: argparse.Namespace) -> int:
    admin_key = None
    if args.admin_key_env:
        admin_key = os.environ.get(args.admin_key_env)
        if not admin_key:
            raise UsageError(f"--admin-key-env {args.admin_key_env}: that variable is not set")
    gateway = build_gateway(args)
    from ors_gym.gateway.serve import serve_forever

    try:
        serve_forever(gateway, args.host, args.port, admin_key=admin_key,
                      public_url=args.public_url)
    except SystemExit as exc:  # uvicorn exits when it cannot bind
        if exc.code in (0, None):
            return EXIT_OK
        print(f"ors-gym: could not serve on {args.host}:{args.port} (see the error above); "
              "pick another --port, or --port 0 for a free one", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        pass
    return EXIT_OK
