"""``TokenEnv``'s own cost per turn as a conversation grows, against re-rendering the history.

One episode is ``TURNS`` turns of the bundled ``Counter`` environment (in
process), each completion a ``<think>`` block and a tool call, through
``TokenEnv`` with a tiny Qwen3-style tokenizer built here (a byte-level BPE and
TRL's Qwen3 chat template; no download). Per turn it measures CPU time:

- ``TokenEnv`` own: ``TokenEnv.step`` minus the wrapped env's ``step`` inside it,
  on the calling thread (decoding and parsing the ids, the reply's chat messages,
  the bridge's ids);
- env step: the wrapped env's ``step`` inside ``TokenEnv``, the whole process's
  (the env's event-loop thread included).

The tokenizer runs on one thread (``TOKENIZERS_PARALLELISM=false``): its worker
pool would spin after each call, and that CPU would land in what is timed next.

The baseline is the text pipeline on the same actions: ``Conversation`` steps the
env, and each turn the whole conversation so far is rendered with
``apply_chat_template`` and tokenized (what a trainer re-tokenising the text
history pays per turn); its env step is timed the same way. The env gets the same
text in both (the reply without its reasoning), so its step does the same work; the
baseline's history lacks the reasoning, so it re-renders fewer tokens than
``TokenEnv`` holds (in the baseline's favour).

Bridges: the chat-template diff, and the ``renderers`` Qwen3 renderer when the
library is installed. Rounds interleave the cases (rotating order); the figure
per turn is the median over rounds. Reported ratios, all from this run: own cost
at the last turn / at turn 2 (target <= 1.3), own cost / re-render at the last
turn (lower is better), env step in ``TokenEnv`` / in the text pipeline. The env
gets the same actions in both (asserted), so it does the same work; the time of
that work moves with what ran before it on the core (caches), by up to 2x either
way on a loaded machine, so read that row as a check, not a cost.

Run: ``python -m benchmarks.bench_tokens`` (``--quick`` for fewer rounds,
``--json PATH`` to save the rows). Needs the ``trl`` extra (transformers, trl's
Qwen3 template); ``renderers`` for the second bridge.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `ors_gym` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, format_rows, row, write_json

TURNS = 30
EARLY = 2
TARGET_FLAT = 1.3
ENV_ID = "ors/Counter-v0"


def _tiny() -> Any:
    """The test suite's tiny tokenizer builder (``tests/_tiny_lm.py``)."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import _tiny_lm

    return _tiny_lm


class _Timed:
    """Wraps an env; adds each ``step``'s CPU seconds to ``spent`` (the process's: the
    env's event-loop thread included) and to ``spent_here`` (this thread's)."""

    def __init__(self, env: Any) -> None:
        import gymnasium as gym

        class Timed(gym.Wrapper):  # type: ignore[type-arg]
            def step(inner, action: Any) -> Any:
                self.actions.append(action)
                start, here = time.process_time(), time.thread_time()
                try:
                    return inner.env.step(action)
                finally:
                    self.spent += time.process_time() - start
                    self.spent_here += time.thread_time() - here

        self.spent = self.spent_here = 0.0
        self.actions: list[Any] = []
        self.env = Timed(env)


def _texts(lm: Any, turns: int) -> list[str]:
    out = []
    for t in range(turns):
        name = "increment" if t % 2 == 0 else "decrement"
        args = {"amount": 2} if name == "increment" else {"amount": 1}
        out.append(lm.tool_call_text(name, args, think=f"Turn {t}: I call {name}."))
    return out


def _episode(lm: Any, tok: Any, renderer: str, turns: int) -> dict[str, list[float]]:
    """One TokenEnv episode; per turn: its own CPU and the wrapped env's step CPU."""
    import gymnasium as gym

    from ors_gym.tokens import TokenEnv

    timed = _Timed(gym.make(ENV_ID, max_episode_steps=turns + 2, max_steps=turns + 2))
    env = TokenEnv(timed.env, tok, renderer=renderer)
    env.reset(seed=0, options={"index": 0})
    own, inner = [], []
    for text in _texts(lm, turns):
        ids = [*lm.encode(tok, text), tok.eos_token_id]
        timed.spent = timed.spent_here = 0.0
        start = time.thread_time()  # TokenEnv's own work runs on this thread
        _, _, terminated, truncated, _ = env.step(ids)
        total = time.thread_time() - start
        assert not (terminated or truncated) and len(env.trajectory.rows) == 1
        own.append(total - timed.spent_here)
        inner.append(timed.spent)
    traj = env.trajectory
    text_all = tok.apply_chat_template(
        traj.messages, tools=traj.tools, tokenize=False, add_generation_prompt=True)
    assert tok(text_all, add_special_tokens=False)["input_ids"] == traj.ids
    env.close()
    return {"own": own, "inner": inner, "actions": timed.actions}


def _text_episode(lm: Any, tok: Any, turns: int) -> dict[str, list[float]]:
    """The text pipeline (the baseline): ``Conversation`` steps the same actions, and each
    turn the whole conversation is rendered with ``apply_chat_template`` and tokenized.
    Per turn: the re-render's CPU and the wrapped env's step CPU."""
    import gymnasium as gym

    from ors_gym.wrappers import Conversation

    timed = _Timed(gym.make(ENV_ID, max_episode_steps=turns + 2, max_steps=turns + 2))
    env = Conversation(timed.env)
    messages, _ = env.reset(seed=0, options={"index": 0})
    tools = env.api_tools("openai")
    rerender, inner = [], []
    for text in _texts(lm, turns):
        timed.spent = 0.0
        # The env gets what TokenEnv sends it: the reply without its reasoning (a text
        # pipeline's server strips it with its reasoning parser).
        messages, *_ = env.step(text.split("</think>")[-1].lstrip("\n"))
        inner.append(timed.spent)
        start = time.thread_time()
        rendered = tok.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True)
        tok(rendered, add_special_tokens=False)["input_ids"]
        rerender.append(time.thread_time() - start)
    env.close()
    return {"rerender": rerender, "inner": inner, "actions": timed.actions}


def run(rounds: int = 20, turns: int = TURNS) -> list[dict[str, Any]]:
    """Rows: per bridge, own cost at turn 2 and the last turn, the re-render baseline, and
    the env step inside TokenEnv against the text pipeline's."""
    import ors_gym  # noqa: F401  (registers the ors/ ids)

    # One thread for the tokenizer: its worker pool spins after each call, and that CPU
    # would land in whatever is timed next.
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        return _run(rounds, turns)
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def _run(rounds: int, turns: int) -> list[dict[str, Any]]:
    lm = _tiny()
    tok = lm.tiny_tokenizer()
    bridges = ["template"]
    if importlib.util.find_spec("renderers") is not None:
        bridges.append("qwen3")
    cases = [*bridges, "text"]
    per: dict[str, list[Any]] = {c: [] for c in cases}
    for c in bridges:  # warm up: imports, caches
        _episode(lm, tok, c, 3)
    _text_episode(lm, tok, 3)
    was_enabled = gc.isenabled()
    gc.disable()  # collected between episodes, never inside one
    try:
        for r in range(rounds):
            k = r % len(cases)
            for c in cases[k:] + cases[:k]:
                per[c].append(
                    _text_episode(lm, tok, turns) if c == "text" else _episode(lm, tok, c, turns))
                gc.collect()
    finally:
        if was_enabled:
            gc.enable()

    def med(values: list[float]) -> float:
        return statistics.median(values) * 1e6

    def calls(actions: list[Any]) -> list[Any]:
        return [([(c.name, c.arguments) for c in a.tool_calls], a.text) for a in actions]

    for c in bridges:  # the env got the same calls in both pipelines: the same steps
        assert calls(per[c][0]["actions"]) == calls(per["text"][0]["actions"]), c
    last = turns
    base = {key: {t: med([ep[key][t - 1] for ep in per["text"]]) for t in (EARLY, last)}
            for key in ("rerender", "inner")}
    rows = []
    for bridge in bridges:
        eps = per[bridge]
        own = {t: med([ep["own"][t - 1] for ep in eps]) for t in (EARLY, last)}
        inner = {t: med([ep["inner"][t - 1] for ep in eps]) for t in (EARLY, last)}
        name = "template" if bridge == "template" else "renderers"
        rows.append(row("tokens", f"{name} own, turn {last} vs {EARLY}", own[last], own[EARLY],
                        own[last] / own[EARLY], "us CPU", f"own at turn {EARLY}",
                        bridge=bridge, turn=last, kind="flat"))
        for t in (EARLY, last):
            rows.append(row("tokens", f"{name} own vs re-render, turn {t}", own[t],
                            base["rerender"][t], own[t] / base["rerender"][t], "us CPU",
                            "apply_chat_template, whole history",
                            bridge=bridge, turn=t, kind="rerender"))
            rows.append(row("tokens", f"{name} env step, turn {t}", inner[t],
                            base["inner"][t], inner[t] / base["inner"][t], "us CPU",
                            "env step under Conversation",
                            bridge=bridge, turn=t, kind="env"))
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        if r["kind"] == "flat":
            ok = r["ratio"] <= TARGET_FLAT
            out.append(f"target: {r['case']} <= {TARGET_FLAT}x: {r['ratio']:.2f}x "
                       f"({'met' if ok else 'MISSED'})")
        elif r["kind"] == "rerender" and r["turn"] != EARLY:
            out.append(f"{r['case']}: {r['ratio']:.3f}x the re-render "
                       f"({1 / r['ratio']:.1f}x cheaper)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds")
    parser.add_argument("--turns", type=int, default=TURNS, help="turns per episode")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = run(rounds=5 if args.quick else 20, turns=args.turns)
    print(format_rows(rows))
    for line in verdicts(rows):
        print(line)
    if args.json:
        write_json(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
