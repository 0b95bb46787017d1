"""A token trajectory as veRL's ``AgentLoopOutput``.

``Trajectory.to_verl()`` names the fields; this adds what veRL's own type
requires and its batching reads: ``metrics`` (an ``AgentLoopMetrics``),
``num_turns`` counted as veRL's ``ToolAgentLoop`` counts them (the opening
prompt, each assistant turn, each round of environment replies; no system
message), the ``turn_scores``/``tool_rewards`` extra fields veRL's loops
always carry, and a response held to ``rollout.response_length``. The
episode's ``stop_reason`` (:mod:`ors_gym.tokens.stops`) is an extra field, with
``finish_reason`` in veRL's words; an episode the environment failed
(``env_error``, ``timeout``) or whose first prompt did not fit
(``context_overflow``) has its ``response_mask`` zeroed, so it is not trained
on (and the overflowing prompt is cut to ``rollout.prompt_length`` from the
left, as veRL cuts its own, with reward 0). A vision model's row carries its images as
``multi_modal_data={"images": [...]}``, which veRL's processor expands again (pixel
values, M-RoPE positions) against the row's placeholders; an overflowing prompt (never
trained on) goes without its images and their placeholders, whose runs the cut would split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ors_gym.tokens import Trajectory, stops

__all__ = ["agent_loop_output", "num_turns"]


def num_turns(messages: Sequence[Mapping[str, Any]]) -> int:
    """Chat turns as veRL counts them: runs of one role (parallel tool replies are one
    turn), the system message not counted."""
    turns, last = 0, None
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if role != last or role == "assistant":
            turns += 1
        last = role
    return turns


def agent_loop_output(
    trajectory: Trajectory,
    *,
    response_length: int | None = None,
    prompt_length: int | None = None,
    metrics: Mapping[str, Any] | None = None,
) -> Any:
    """veRL's ``AgentLoopOutput`` for ``trajectory`` (its last token row).

    ``response_length``: veRL's ``rollout.response_length``, which the response
    may not exceed (its padding assumes it); ``prompt_length``: its
    ``rollout.prompt_length``, to which an overflowing prompt is cut. ``metrics``:
    the loop's timings (``generate_sequences``, ``tool_calls``...).
    """
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    fields = trajectory.to_verl()
    # a vision model's: the images whose placeholders are in the row, veRL's processor's input
    images = fields.pop("multi_modal_data", None) or {}
    cut = slice(None, response_length)
    fields["response_ids"] = fields["response_ids"][cut]
    fields["response_mask"] = fields["response_mask"][cut]
    if fields["response_logprobs"] is not None:
        fields["response_logprobs"] = fields["response_logprobs"][cut]
    overflow = trajectory.stop_reason == stops.CONTEXT_OVERFLOW
    if trajectory.failed or overflow:  # nothing here to train on
        fields["response_mask"] = [0] * len(fields["response_mask"])
    if overflow:
        fields["reward_score"] = 0.0
        if images:  # not trained on: cut, its image runs would not match its images
            fields["prompt_ids"], images = _without_images(trajectory), {}
        if prompt_length is not None:
            fields["prompt_ids"] = fields["prompt_ids"][-prompt_length:]
    fields["num_turns"] = num_turns(trajectory.messages)
    reason = trajectory.stop_reason
    fields["extra_fields"] = {
        **fields.get("extra_fields", {}),
        "finish_reason": None if reason is None else stops.VERL[reason],
        "turn_scores": list(trajectory.rewards),
        "tool_rewards": [],
    }
    return AgentLoopOutput(
        **fields,
        multi_modal_data=images,
        metrics=AgentLoopMetrics(**dict(metrics or {})),
    )


def _without_images(trajectory: Trajectory) -> list[int]:
    """The last row's prompt without its images' placeholder runs."""
    row = trajectory.rows[-1]
    runs = getattr(row.multi_modal_data, "mm_placeholders", {}).get("image", ())
    drop = {i for r in runs for i in range(r.offset, r.offset + r.length)}
    return [t for i, t in enumerate(row.prompt_ids) if i not in drop]

