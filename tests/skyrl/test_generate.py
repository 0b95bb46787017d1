"""SkyRL: ``ors_gym.skyrl.generate`` plays a generator's batch of rows over one token batch.

Real environments on a real ORS server (over HTTP), a real tokenizer and chat template
(``tests/_tiny_lm.py``), and a scripted sampler standing in for SkyRL's inference
engine: each episode's turns are sampled together, rewards are the environments' own,
and no session is left open once the batch is returned.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("skyrl_gym")
pytest.importorskip("trl")  # tests/_tiny_lm.py takes TRL's Qwen3 chat template

from _tiny_lm import answer_text, encode, tiny_tokenizer, tool_call_text

from ors_gym.sampling import Sample
from ors_gym.skyrl import generate, rows
from ors_gym.tokens import EnvPool, EpisodeRow


def test_a_batch_of_rows_is_played_at_once_and_given_back(server_url: str) -> None:
    tok = tiny_tokenizer()
    batch_rows = [*rows("ors/Counter-v0", num_tasks=1, base_url=server_url),
                  *rows("ors/QA-v0", num_tasks=1, base_url=server_url)]
    scripts = {  # Counter task 0: 0 -> 6; QA task 0: the capital of France
        "The counter is at 0.": [tool_call_text("increment", {"amount": 3}),
                                 tool_call_text("increment", {"amount": 3}),
                                 tool_call_text("done", {})],
        "capital of France": [answer_text("Paris")],
    }
    turns: dict[str, list[str]] = {k: list(v) for k, v in scripts.items()}
    asked: list[int] = []

    class Engine:  # a TokenSampler over a stand-in engine that samples a turn's prompts at once
        async def sample_batch(self, prompts: list[list[int]], *, max_tokens: list[int],
                               **params: Any) -> list[Sample]:
            asked.append(len(prompts))  # the running episodes' prompts, together
            assert all(0 < m <= 256 for m in max_tokens)
            assert tok.eos_token_id in params["stop_token_ids"]  # the bridge's stop ids
            out = []
            for prompt in prompts:
                key = next(k for k in turns if k in tok.decode(prompt))
                ids = [*encode(tok, turns[key].pop(0)), tok.eos_token_id]
                out.append(Sample(ids, [-0.5] * len(ids), "stop"))
            return out

        async def sample(self, prompt_ids: list[int], **params: Any) -> Sample:
            raise AssertionError("the lockstep driver asks for a turn's prompts together")

        async def aclose(self) -> None:
            return None

    async def run() -> tuple[dict[str, Any], EnvPool]:
        backends = EnvPool()
        try:
            return await generate(batch_rows, tok, Engine(), max_tokens=256,
                                  pool=backends), backends
        finally:
            opened = [backends.env(EpisodeRow.from_row(r)).backend.open_sessions
                      for r in batch_rows]
            assert opened == [frozenset(), frozenset()]  # every session given back
            await backends.aclose()

    out, backends = asyncio.run(run())
    assert backends.made == 2  # one backend per environment, for the whole batch
    assert out["rewards"] == [1.0, 1.0] and out["stop_reasons"] == ["stop", "stop"]
    assert asked == [2, 1, 1]  # turn 1 both at once; QA ended, Counter went on
    mask = out["loss_masks"][0]
    assert sum(mask) == sum(len(encode(tok, t)) + 1 for t in scripts["The counter is at 0."])
    assert out["rollout_logprobs"][0][: mask.index(0)] == [-0.5] * mask.index(0)
