"""veRL: a Qwen3.5 checkpoint with ``enable_thinking=False`` through the ``ors`` agent loop.

veRL loads the tokenizer from ``model.path``: here a folder named as the hub model
(``Qwen/Qwen3.5-9B``, relative to the working folder, so the tokenizer's ``name_or_path``
is the hub name and ``renderers`` maps it to its ``qwen3.5`` renderer), around Qwen3.5's
real chat template (``tests/_families.py``). ``data.apply_chat_template_kwargs`` reach
that renderer (they raised before), and the model's calls, written in Qwen3.5's
``<function=...>`` format, reach the environment as calls. Runs in the veRL
venv (``bash scripts/verl-venv.sh --test``), like ``test_verl.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "verl.experimental.agent_loop",
    reason="verl has a venv of its own: bash scripts/verl-venv.sh --test",
)
pytest.importorskip("renderers")

from _families import completion, encode, family_tokenizer
from _tiny_lm import tiny_model
from test_verl import TinyServer, batch_of, verl_config
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

from ors_gym.verl import rows

COUNTER = "ors/Counter-v0"


def test_a_hub_qwen35_with_thinking_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = family_tokenizer("qwen3.5")
    monkeypatch.chdir(tmp_path)
    model_dir = Path("Qwen", "Qwen3.5-9B")
    tiny_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    model = tiny_model(tok).eval()
    from transformers import AutoTokenizer

    from ors_gym.families import detect

    found = detect(AutoTokenizer.from_pretrained(str(model_dir)))  # as veRL loads it
    assert (found.family, found.how) == ("qwen3.5", "the hub name 'Qwen/Qwen3.5-9B'")

    def turn(name: str, arguments: dict[str, Any]) -> list[int]:
        return encode(tok, completion("qwen3.5", calls=((name, arguments),)))

    script = [turn("increment", {"amount": 3}), turn("increment", {"amount": 3}),
              turn("done", {})]
    server = TinyServer(model, tok, {"The counter is at 0.": script})
    config = verl_config(model_dir, "+data.apply_chat_template_kwargs.enable_thinking=false",
                         "actor_rollout_ref.rollout.prompt_length=1024")
    worker = AgentLoopWorker(config, llm_client=server)

    async def run() -> Any:
        from ors_gym.tokens import shared_pool

        try:
            return await worker.generate_sequences(
                batch_of(rows(COUNTER, num_tasks=1), config, tok, model_dir))
        finally:
            await shared_pool().aclose()

    out = asyncio.run(run())
    assert out.batch["rm_scores"].sum().item() == 1.0  # 0 + 3 + 3, then done: graded right
    first = server.calls[0]["prompt_ids"]
    assert tok.decode(first).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert out.non_tensor_batch["stop_reason"][0] == "env_ended"
