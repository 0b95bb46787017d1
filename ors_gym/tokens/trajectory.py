"""The token record of one episode, and its export in each trainer's own field names.

A :class:`Trajectory` holds one or more :class:`TokenRow`: a row is one token
sequence, a prompt and everything after it, in which every id the model sampled
is kept as it came (``mask`` 1) and everything else is the environment's or the
chat template's (``mask`` 0). An episode has one row unless the chat template
rewrites its history (Qwen3 drops earlier reasoning at a new user message):
then a new row starts from the conversation as the template renders it, as
step-wise trainers (SkyRL's ``step_wise_trajectories``, verifiers) take it.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_gym.tokens import stops

__all__ = ["TokenRow", "Trajectory", "filter_stale"]


@dataclass
class TokenRow:
    """One token sequence: ``prompt_ids``, then ``completion_ids`` with ``mask``
    (1 on sampled ids, 0 on the environment's and the template's) and
    ``logprobs`` (the sampler's, 0.0 on environment ids), both aligned with
    ``completion_ids``. ``turns``: the assistant turns sampled in this row;
    ``first_message``: the index in ``Trajectory.messages`` of the row's first
    assistant turn."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: int = 0
    first_message: int = 0
    images: list[Any] = field(default_factory=list)
    multi_modal_data: Any = None

    @property
    def ids(self) -> list[int]:
        """The whole sequence (a new list)."""
        return [*self.prompt_ids, *self.completion_ids]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    def add(self, ids: list[int], *, sampled: bool, logprobs: list[float] | None = None) -> None:
        """Append ``ids``: sampled (mask 1, with the sampler's ``logprobs``) or not (mask 0,
        logprob 0.0)."""
        self.completion_ids.extend(ids)
        self.mask.extend([1 if sampled else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


@dataclass
class Trajectory:
    """One episode as tokens.

    ``rows``: the token sequences (one unless the template rewrote history; see
    the module docstring). ``prompt_ids``, ``completion_ids``, ``mask`` and
    ``logprobs`` are those of the last row, the one that ends the episode (for a
    one-row episode: the first prompt and everything after it). ``reward``: the
    episode return (the sum of the env's step rewards); ``rewards``: each
    step's. ``messages``: the conversation as the model saw it, OpenAI chat
    dicts (each assistant turn's content is the completion's text as sampled,
    reasoning and tool-call tags included; the environment's reply to the last
    turn, which the model never reads, is in that step's ``info["new_messages"]``
    only); ``tools``: the tools in OpenAI
    format. ``stop_reason``: ``None`` while running, then one of
    :data:`ors_gym.tokens.stops.STOP_REASONS` (``"completed"``, ``"env_ended"``,
    ``"max_turns"``, ``"max_tokens"``, ``"context_overflow"``, ``"parse_error"``,
    ``"env_error"``, ``"timeout"``); ``failed`` says the environment failed.
    ``logprobs_given``: every turn came with the sampler's logprobs. ``images``:
    the images the environment sent (arrays, in order), also for a text model
    that saw only a note, and the final reply's the model never read; the images a
    vision model saw are each row's ``TokenRow.images``. ``multi_modal_data``: a
    multimodal renderer's data for the last row's placeholders. ``policy_versions``:
    one per sampled turn, in order, the version of the weights that sampled it (a
    step action's ``"policy_version"``; None where the sampler named none).
    ``reward_parts``: the named parts the environment gave with its rewards
    (``ToolOutput.metadata["reward_parts"]``), summed per name over the episode.
    """

    rows: list[TokenRow]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    renderer: str = "template"
    rewards: list[float] = field(default_factory=list)
    stop_reason: str | None = None
    logprobs_given: bool = True
    images: list[Any] = field(default_factory=list)
    multi_modal_data: Any = None
    policy_versions: list[int | None] = field(default_factory=list)
    reward_parts: dict[str, float] = field(default_factory=dict)

    # -- the last row ------------------------------------------------------------------
    @property
    def prompt_ids(self) -> list[int]:
        return self.rows[-1].prompt_ids

    @property
    def completion_ids(self) -> list[int]:
        return self.rows[-1].completion_ids

    @property
    def mask(self) -> list[int]:
        return self.rows[-1].mask

    @property
    def logprobs(self) -> list[float]:
        return self.rows[-1].logprobs

    @property
    def ids(self) -> list[int]:
        """The last row's whole sequence (what ``TokenEnv.step`` returned last)."""
        return self.rows[-1].ids

    @property
    def reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def turns(self) -> int:
        """Assistant turns sampled in the episode (all rows)."""
        return sum(r.turns for r in self.rows)

    @property
    def step_wise(self) -> bool:
        """True when the episode needed more than one row."""
        return len(self.rows) > 1

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    @property
    def failed(self) -> bool:
        """The environment failed (``env_error``, ``timeout``): no grade to train on."""
        return self.stop_reason in stops.FAILURES

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The trajectory as a JSON-ready dict, whole: every field of it and of its rows
        (images as base64 PNG, arrays as base64 ``.npy``), except ``multi_modal_data``,
        the processor's output for the images (tensors), which a processor rebuilds from
        them. :meth:`from_dict` reads it back equal. The dict shares nothing with the
        trajectory."""
        out = copy.deepcopy({k: getattr(self, k) for k in _FIELDS if k not in ("rows", "images")})
        out["rows"] = [{k: list(getattr(r, k)) if k in _ROW_LISTS else getattr(r, k)
                        for k in _ROW_FIELDS if k != "images"}
                       | {"images": [_image_json(i) for i in r.images]} for r in self.rows]
        out["images"] = [_image_json(i) for i in self.images]
        out["reward"] = self.reward  # for a reader that wants only the return
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trajectory:
        """The trajectory :meth:`to_dict` wrote (``multi_modal_data`` None)."""
        try:
            rows = [TokenRow(**{k: row[k] for k in _ROW_FIELDS if k != "images"},
                             images=[_image_from_json(i) for i in row["images"]])
                    for row in data["rows"]]
            kwargs = {k: data[k] for k in _FIELDS if k not in ("rows", "images")}
            images = [_image_from_json(i) for i in data["images"]]
        except (KeyError, TypeError) as exc:
            raise ValueError(
                f"not a trajectory as Trajectory.to_dict writes it ({type(exc).__name__}: "
                f"{exc}): pass the dict to_dict gave (or the gateway's session API answered)"
            ) from exc
        return cls(rows=rows, images=images, **kwargs)

    def row_versions(self, row: int = -1) -> list[int | None]:
        """The policy versions of the turns sampled in one row (the last by default)."""
        k = range(len(self.rows))[row]
        start = sum(r.turns for r in self.rows[:k])
        return list(self.policy_versions[start : start + self.rows[k].turns])

    # -- exporters -----------------------------------------------------------------------
    def to_trl(self, row: int = -1) -> dict[str, Any]:
        """TRL ``rollout_func`` fields for one row (the last by default): ``prompt_ids``,
        ``completion_ids``, ``logprobs`` (None unless the sampler gave them) and
        ``env_mask`` (1 on sampled ids), ``policy_versions`` (the row's turns'); for a
        vision model, ``images`` (the row's)."""
        r = self.rows[row]
        out: dict[str, Any] = {
            "prompt_ids": list(r.prompt_ids),
            "completion_ids": list(r.completion_ids),
            "logprobs": list(r.logprobs) if self.logprobs_given else None,
            "env_mask": list(r.mask),
            "policy_versions": self.row_versions(row),
        }
        if r.images:  # a vision model's: the row's images, in placeholder order
            out["images"] = list(r.images)
        return out

    def to_verl(self, row: int = -1) -> dict[str, Any]:
        """veRL ``AgentLoopOutput`` fields for one row (the last by default); for a vision
        model, ``multi_modal_data={"images": [...]}`` (``AgentLoopOutput``'s key): the
        images whose placeholders are in the row, in order, as veRL's processor expands
        them."""
        r = self.rows[row]
        out: dict[str, Any] = {
            "prompt_ids": list(r.prompt_ids),
            "response_ids": list(r.completion_ids),
            "response_mask": list(r.mask),
            "response_logprobs": list(r.logprobs) if self.logprobs_given else None,
            "reward_score": self.reward,
            "num_turns": len(self.messages),
            "extra_fields": {
                "stop_reason": self.stop_reason,
                "rows": len(self.rows),
                "renderer": self.renderer,
                "policy_versions": self.row_versions(row),
                "reward_parts": dict(self.reward_parts),
            },
        }
        if r.images:  # exactly the images whose placeholders are in this row, in order
            out["multi_modal_data"] = {"images": list(r.images)}
        return out

    def to_skyrl(self, row: int = -1) -> dict[str, Any]:
        """SkyRL ``GeneratorOutput`` fields for one trajectory (values, not batches): the
        row's ids, ``loss_masks``, ``rewards`` (the episode return), ``stop_reasons``
        (SkyRL's names, :data:`ors_gym.tokens.stops.SKYRL`: ``"length"`` for a token
        budget, ``"abort"`` for an environment failure, else ``"stop"``),
        ``rollout_logprobs``, ``policy_versions`` (the row's turns'), ``reward_parts``
        (the episode's) and, for step-wise training, ``is_last_step``. A row with images
        (a vision model's) is refused: SkyRL's output carries none."""
        r = self.rows[row]
        if r.images:
            raise ValueError(
                "SkyRL's GeneratorOutput has no field for images, and this row's ids hold "
                f"{len(r.images)} image placeholder run(s): train a vision model with veRL's "
                "'ors' agent loop (to_verl() carries the images), or drop processor= so the "
                "model reads a note per image"
            )
        return {
            "prompt_token_ids": list(r.prompt_ids),
            "response_ids": list(r.completion_ids),
            "rewards": self.reward,
            "loss_masks": list(r.mask),
            "stop_reasons": stops.SKYRL.get(self.stop_reason or "", "stop"),
            "rollout_logprobs": list(r.logprobs) if self.logprobs_given else None,
            "policy_versions": self.row_versions(row),
            "reward_parts": dict(self.reward_parts),
            "is_last_step": row in (-1, len(self.rows) - 1),
        }


#: The fields ``to_dict`` carries (``multi_modal_data`` is the processor's output: not carried).
_NOT_CARRIED = "multi_modal_data"
_FIELDS = tuple(f.name for f in dataclasses.fields(Trajectory) if f.name != _NOT_CARRIED)
_ROW_FIELDS = tuple(f.name for f in dataclasses.fields(TokenRow) if f.name != _NOT_CARRIED)
_ROW_LISTS = ("prompt_ids", "completion_ids", "mask", "logprobs")


def _image_json(image: Any) -> dict[str, str]:
    """An image as JSON: a ``PIL.Image`` as base64 PNG, an array as base64 ``.npy``."""
    buf = io.BytesIO()
    if hasattr(image, "save") and hasattr(image, "mode"):  # PIL
        image.save(buf, format="PNG")
        return {"png": base64.b64encode(buf.getvalue()).decode("ascii")}
    import numpy as np

    np.save(buf, np.asarray(image), allow_pickle=False)
    return {"npy": base64.b64encode(buf.getvalue()).decode("ascii")}


def _image_from_json(data: Mapping[str, str]) -> Any:
    if "png" in data:
        from PIL import Image

        with Image.open(io.BytesIO(base64.b64decode(data["png"]))) as image:
            image.load()
            return image.copy()
    import numpy as np

    return np.load(io.BytesIO(base64.b64decode(data["npy"])), allow_pickle=False)


def filter_stale(
    trajectories: Iterable[Trajectory],
    *,
    max_span: int | None = None,
    current_version: int | None = None,
    max_lag: int | None = None,
) -> list[Trajectory]:
    """The trajectories fit to train on now, in order: those whose turns span at most
    ``max_span`` policy versions (newest minus oldest), and whose oldest turn is at most
    ``max_lag`` versions behind ``current_version``. Turns with no version are not
    counted; a trajectory with none is kept (nothing says it is stale)."""
    for name, value in (("max_span", max_span), ("max_lag", max_lag)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ValueError(f"{name} must be a non-negative int or None, got {value!r}")
    if (max_lag is None) != (current_version is None):
        raise ValueError(
            "max_lag and current_version go together: pass both to drop trajectories whose "
            "oldest turn is more than max_lag versions behind current_version"
        )
    kept = []
    for traj in trajectories:
        known = [v for v in traj.policy_versions if v is not None]
        if known:
            if max_span is not None and max(known) - min(known) > max_span:
                continue
            if max_lag is not None and current_version is not None and (
                current_version - min(known) > max_lag
            ):
                continue
        kept.append(traj)
    return kept
