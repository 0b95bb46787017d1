"""TRL: ``GRPOConfig.chat_template_kwargs`` reach a hub tokenizer's renderer in ``rollout_func``.

A tokenizer named as a hub model (``Qwen/Qwen3.5-9B``, which ``renderers`` maps to its
``qwen3.5`` renderer) around Qwen3.5's real chat template (``tests/_families.py``), a
tiny untrained model, and one ``GRPOTrainer`` step with ``enable_thinking=False``: the
common set-up, which raised before the kwargs could reach the renderer.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

if importlib.util.find_spec("trl") is None or importlib.util.find_spec("renderers") is None:
    pytest.skip("needs the trl and tokens extras", allow_module_level=True)

from ors_gym.trl import OrsSpec


@pytest.mark.timeout(600)
def test_enable_thinking_false_reaches_the_renderer_of_a_hub_tokenizer(tmp_path: Any) -> None:
    from _families import family_tokenizer
    from _tiny_lm import tiny_model
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = family_tokenizer("qwen3.5", local=False)
    assert tokenizer.name_or_path == "Qwen/Qwen3.5-9B"
    model = tiny_model(tokenizer, seed=0)
    spec = OrsSpec("ors/Counter-v0", indices=[0])
    seen: list[dict[str, Any]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        out = spec.rollout_func(prompts, trainer)
        seen.append(out)
        return out

    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=8, learning_rate=1e-3, report_to="none", use_cpu=True, seed=0,
        save_strategy="no", disable_tqdm=True, bf16=False, gradient_checkpointing=False,
        chat_template_kwargs={"enable_thinking": False},
    )
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args,
                          train_dataset=spec.train_dataset, rollout_func=rollout_func,
                          reward_funcs=spec.reward_funcs)
    try:
        trainer.train()
    finally:
        spec.rollout_func.close()  # type: ignore[attr-defined]
    assert seen and all(len(out["prompt_ids"]) == 2 for out in seen)
    for out in seen:
        for prompt, trajectory in zip(out["prompt_ids"], out["ors_trajectory"], strict=True):
            assert trajectory.renderer == "renderers:qwen3.5"
            # the empty reasoning block that enable_thinking=False puts in the prompt
            tail = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
            assert tokenizer.decode(prompt).endswith(tail)
