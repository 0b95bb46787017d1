"""It learns: GRPO through ``OrsSpec.rollout_func`` on the bundled Counter, tiny model, CPU.

A model built here (a byte-level BPE trained on local text with TRL's Qwen3 chat
template, a small Qwen3 with random weights) is warmed up on the tool-call
format only: on three Counter tasks (targets 2, 3 and 4) it is shown every
``increment`` amount from 1 to 5 equally often, each followed by ``done``. So
it writes well-formed two-turn episodes but hits the trained task's target (3)
only about one time in five. A real ``GRPOTrainer`` then trains
it through ``OrsSpec(...).rollout_func``: every episode is a ``TokenEnv``
episode (sampled ids verbatim, the tool result's tokens masked out, the
sampler's logprobs), graded by Counter's own ``done``.

Counter because a tiny model can visibly improve on it from a format-only
warm-up: the reward is the environment's own (1 when the counter equals the
target), there is signal from the first step (a group of sixteen episodes
usually holds a hit), and each episode is two sampled turns with the
environment's tokens between them, the case token-level training exists for.
One task keeps the run to minutes on a CPU; learning the target from the
prompt across several tasks takes a larger model or many more steps.

Reported per seed: the mean reward of the first and last ``--window`` steps,
their difference and ratio, and the run's seconds; a plot of the curves and
the JSON go to ``benchmarks/results/``. Run:
``python -m benchmarks.bench_learn_tokens`` (``--seeds 0 1 2``, ``--jobs 3``
to run the seeds at once, ``--steps``, ``--quick`` for a short run). ``--family
qwen3.5`` runs the same with Qwen3.5's chat template and its ``<function=...>``
XML tool calls (thinking off, through ``chat_template_kwargs``): the family is
found from the tokenizer, and its completions read by its own parser. Needs the
``trl`` extra (and ``tokens`` for a family other than ``qwen3``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _tiny_lm
from benchmarks._common import RESULTS
from ors_gym.serving import quiet_sdk_logging

quiet_sdk_logging()

ENV = "ors/Counter-v0"
#: The Counter train task trained on (target 3: one ``increment`` of 3, then ``done``).
TASKS = (12,)
#: The tasks of the format warm-up (targets 2, 3 and 4).
WARM_TASKS = (18, 12, 17)
AMOUNTS = (1, 2, 3, 4, 5)
MARGIN = 0.25  # the last steps' mean reward must beat the first steps' by this much


def warm_up_rows(tokenizer: Any, tasks: tuple[int, ...] = WARM_TASKS,
                 family: str = "qwen3") -> list[tuple[Any, Any, Any]]:
    """Token episodes of every amount on every task, each then ``done``: the format, not
    the answer (the amount does not depend on the target)."""
    import gymnasium as gym

    from ors_gym.tokens import TokenEnv

    env = TokenEnv(gym.make(ENV), tokenizer,
                   chat_template_kwargs=_tiny_lm.template_kwargs(family))
    rows = []
    try:
        for index in tasks:
            for amount in AMOUNTS:
                env.reset(options={"index": index})
                for text in (_tiny_lm.tool_call("increment", {"amount": amount}, family),
                             _tiny_lm.tool_call("done", {}, family)):
                    ids = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)
                    env.step(list(ids["input_ids"]))
                t = env.trajectory
                rows.append((t.prompt_ids, t.completion_ids, t.mask))
    finally:
        env.close()
    return rows


def build(seed: int, warm_steps: int, lr: float,
          family: str = "qwen3") -> tuple[Any, Any, float]:
    """The tokenizer, a warmed-up model for ``seed`` and its last warm-up loss."""
    replies = [_tiny_lm.tool_call("increment", {"amount": a}, family) for a in AMOUNTS]
    tok = _tiny_lm.tokenizer([ENV], [*replies, _tiny_lm.tool_call("done", {}, family)],
                             family=family)
    lm = _tiny_lm.model(tok, seed=seed)
    rows = warm_up_rows(tok, family=family)
    losses = _tiny_lm.warm_up(lm, rows, pad=tok.pad_token_id, steps=warm_steps, lr=lr)
    return tok, lm, losses[-1]


def train(seed: int, *, steps: int, warm_steps: int, warm_lr: float, generations: int,
          lr: float, out: str, config: dict[str, Any] | None = None,
          family: str = "qwen3") -> dict[str, Any]:
    """One GRPO run; returns its per-step mean rewards."""
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from ors_gym.trl import OrsSpec

    torch.set_num_threads(1)
    start = time.perf_counter()
    tok, lm, warm_loss = build(seed, warm_steps, warm_lr, family)
    spec = OrsSpec(ENV, indices=list(TASKS))
    settings: dict[str, Any] = {
        "output_dir": out, "max_steps": steps, "per_device_train_batch_size": generations,
        "num_generations": generations, "max_completion_length": 96, "learning_rate": lr,
        "logging_steps": 1, "report_to": "none", "use_cpu": True, "seed": seed,
        "save_strategy": "no", "temperature": 1.0, "disable_tqdm": True,
        "gradient_checkpointing": False, "bf16": False,
        # the loss on the highest-entropy fifth of the sampled tokens (the amount, not the
        # format a tiny model learnt by rote), as "Beyond the 80/20 rule" recommends
        "top_entropy_quantile": 0.2,
        # Adam's first steps move every weight by about the learning rate whatever its
        # gradient: a warm-up and a larger epsilon keep that from wiping out the format
        "warmup_steps": 5, "adam_epsilon": 1e-4,
    }
    if _tiny_lm.template_kwargs(family):  # reach the family's renderer through TRL's config
        settings["chat_template_kwargs"] = _tiny_lm.template_kwargs(family)
    args = GRPOConfig(**{**settings, **(config or {})})
    trainer = GRPOTrainer(model=lm, processing_class=tok, args=args,
                          train_dataset=spec.train_dataset, rollout_func=spec.rollout_func,
                          reward_funcs=spec.reward_funcs)
    trainer.train()
    rewards = [h["rewards/ors_reward/mean"] for h in trainer.state.log_history
               if "rewards/ors_reward/mean" in h]
    spec.rollout_func.close()  # type: ignore[attr-defined]
    from ors_gym.families import detect

    return {"seed": seed, "rewards": rewards, "warm_up_loss": warm_loss,
            "renderer": detect(tok).family,
            "seconds": time.perf_counter() - start}


def summarise(run: dict[str, Any], window: int) -> dict[str, Any]:
    first = statistics.fmean(run["rewards"][:window])
    last = statistics.fmean(run["rewards"][-window:])
    return {**run, "first": first, "last": last, "difference": last - first,
            "ratio": last / first if first else float("inf"), "learned": last - first >= MARGIN}


def plot(runs: list[dict[str, Any]], path: Path, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        smooth = [statistics.fmean(run["rewards"][max(0, k - window + 1):k + 1])
                  for k in range(len(run["rewards"]))]
        (line,) = ax.plot(range(1, len(smooth) + 1), smooth, label=f"seed {run['seed']} "
                          f"({run['first']:.2f} -> {run['last']:.2f})")
        ax.plot(range(1, len(run["rewards"]) + 1), run["rewards"], alpha=0.3,
                color=line.get_color())
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(f"mean episode reward (faint: per step; line: last {window})")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("GRPO through OrsSpec.rollout_func (TokenEnv), tiny model on CPU")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _setting(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warm-steps", type=int, default=150)
    parser.add_argument("--warm-lr", type=float, default=1e-2)
    parser.add_argument("--generations", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                        help="more GRPOConfig settings (a number, true/false or text)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once, one process each")
    parser.add_argument("--family", choices=sorted(_tiny_lm.FAMILIES), default="qwen3",
                        help="the chat template and tool-call format of the tiny model")
    parser.add_argument("--quick", action="store_true", help="8 steps, one seed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.seeds, args.window = 8, args.seeds[:1], 2
    logging.getLogger("transformers").setLevel(logging.ERROR)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    runs = []
    with tempfile.TemporaryDirectory() as out, ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(train, seed, steps=args.steps, warm_steps=args.warm_steps,
                               warm_lr=args.warm_lr,
                               generations=args.generations, lr=args.lr, out=f"{out}/{seed}",
                               config=dict(_setting(c) for c in args.config),
                               family=args.family)
                   for seed in args.seeds]
        for seed, future in zip(args.seeds, futures, strict=True):
            run = summarise(future.result(), args.window)
            runs.append(run)
            print(f"seed {seed}: first {args.window} steps {run['first']:.3f}, last "
                  f"{args.window} {run['last']:.3f}, difference {run['difference']:+.3f}, "
                  f"ratio {run['ratio']:.2f}x (warm-up loss {run['warm_up_loss']:.3f}, "
                  f"read as {run['renderer']}, {run['seconds']:.0f} s)", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "bench_learn_tokens" + ("" if args.family == "qwen3" else f"_{args.family}")
    plot(runs, args.out / f"{stem}.png", args.window)
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"env": ENV, "family": args.family, "tasks": list(TASKS),
         "settings": {k: str(v) for k, v in vars(args).items()},
         "runs": runs}, indent=1) + "\n")
    learned = sum(r["learned"] for r in runs)
    print(f"learned (last - first >= {MARGIN}) on {learned} of {len(runs)} seeds; "
          f"plot and JSON in {args.out}")
    return 0 if learned == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
