"""The training environments of :mod:`ors_gym.train`: an ORS env in the fixed spaces SB3 needs.

``make_env`` wraps an ORS environment (in-process, or over HTTP at ``base_url``)
into ``DiscreteToolActions`` plus one observation wrapper (``MetadataVector`` /
``ImageObservation`` / ``TextVector``); ``check_trainable`` says, before any
training, why an environment cannot be trained with an observation choice
(:class:`NotTrainableError`). Public through :mod:`ors_gym.train`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from ors_gym.wrappers import (
    DiscreteToolActions,
    ImageObservation,
    MetadataVector,
    MissingValueError,
    NotEnumerableError,
    TextVector,
)

__all__ = [
    "DEFAULT_MAX_EPISODE_STEPS",
    "IMAGE_SIZE",
    "OBSERVATIONS",
    "TEXT_DIM",
    "NotTrainableError",
    "check_trainable",
    "make_env",
    "trainable_observations",
]

OBSERVATIONS = ("vector", "image", "text")

#: The bundled GridWorld needs at most 8 moves; 15 leaves room for detours while keeping a
#: random walk's success rate low, so learning shows clearly.
DEFAULT_MAX_EPISODE_STEPS = 15
#: The bundled GridWorld's 160 px frames (5x5 cells of 32 px) nearest-resized to 8 px per
#: cell: the same pixels as drawing the grid at 8 px, with a quarter of the CNN's input.
IMAGE_SIZE = (40, 40)
TEXT_DIM = 256


class NotTrainableError(ValueError):
    """``env_id`` cannot be trained with these options; ``reason`` says why in one clause."""

    def __init__(self, env_id: str, reason: str, hint: str = "") -> None:
        super().__init__(f"cannot train on {env_id}: {reason}{f'; {hint}' if hint else ''}")
        self.env_id, self.reason = env_id, reason


def _make_ors_env(
    env_id: str, *, base_url: str | None, max_episode_steps: int
) -> gym.Env[Any, Any]:
    """``gym.make(env_id)``, over HTTP at ``base_url`` when given (in-process otherwise)."""
    import ors_gym  # noqa: F401 - registers the ors/... ids

    if env_id not in gym.registry:
        known = sorted(k for k in gym.registry if k.startswith("ors/"))
        raise ValueError(f"unknown environment id {env_id!r}; registered ORS ids: {known}")
    kwargs: dict[str, Any] = {
        "max_episode_steps": max_episode_steps,
        "max_steps": max_episode_steps,
    }
    if base_url is not None:
        spec = gym.spec(env_id)
        kwargs.update(base_url=base_url, env_class=None)
        if not spec.kwargs.get("env_name"):
            kwargs["env_name"] = spec.name.lower()  # ors/GridWorld-v0 -> "gridworld"
    return gym.make(env_id, **kwargs)


def _grid_size(env: gym.Env[Any, Any]) -> int:
    """The largest ``size`` among the environment's tasks (GridWorld task specs; default 5)."""
    ors = env.unwrapped
    sizes = [5]
    for split in (s.name for s in ors.backend.splits(ors.env_name)):  # type: ignore[attr-defined]
        for i in range(ors.num_tasks(split)):  # type: ignore[attr-defined]
            size = ors.task(i, split).get("size")  # type: ignore[attr-defined]
            if isinstance(size, int):
                sizes.append(size)
    return max(sizes)


def make_env(
    env_id: str = "ors/GridWorld-v0",
    *,
    obs: str = "vector",
    base_url: str | None = None,
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS,
) -> gym.Env[Any, Any]:
    """The ORS env ``env_id`` wrapped for SB3: discrete tool calls, array observations.

    ``obs``: ``"vector"`` (agent and goal ``[row, col]`` from GridWorld's
    metadata, scaled to ``[-1, 1]``), ``"image"`` (the step's image resized to
    40x40x3 uint8, for ``CnnPolicy``) or ``"text"`` (the observation text,
    feature-hashed to 256 floats; works for any environment). Raises
    :class:`NotTrainableError` when the tool calls cannot be enumerated.
    """
    if obs not in OBSERVATIONS:
        raise ValueError(f"obs={obs!r}; choose one of {list(OBSERVATIONS)}")
    env = _make_ors_env(env_id, base_url=base_url, max_episode_steps=max_episode_steps)
    try:
        try:
            env = DiscreteToolActions(env)
        except NotEnumerableError as exc:
            raise NotTrainableError(
                env_id,
                f"it has no finite set of actions ({exc.reason})",
                "list its calls in Python: DiscreteToolActions(env, calls=[...])",
            ) from exc
        if obs == "vector":
            high = _grid_size(env) - 1
            return MetadataVector(
                env, keys={"agent": 2, "goal": 2}, low=0, high=high, normalize=True
            )
        if obs == "image":
            return ImageObservation(env, size=IMAGE_SIZE, resample="nearest")
        return TextVector(env, dim=TEXT_DIM)
    except Exception:
        env.close()
        raise


def check_trainable(
    env_id: str,
    *,
    obs: str = "vector",
    base_url: str | None = None,
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS,
) -> None:
    """Build the training environment once and reset it; raise :class:`NotTrainableError`
    when its calls cannot be enumerated or its first observation lacks what ``obs`` reads
    (``vector``: ``agent``/``goal`` metadata; ``image``: an image)."""
    env = make_env(env_id, obs=obs, base_url=base_url, max_episode_steps=max_episode_steps)
    try:
        if obs == "image":
            first, _ = env.unwrapped.reset()
            if not first.get("images"):
                raise NotTrainableError(env_id, "its observations hold no image for --obs image")
        env.reset()
    except MissingValueError as exc:
        raise NotTrainableError(
            env_id, "its steps report no agent/goal positions for --obs vector"
        ) from exc
    finally:
        env.close()


def trainable_observations(env_id: str, *, base_url: str | None = None) -> list[str]:
    """The ``obs`` choices ``env_id`` can be trained with (empty: none of them)."""
    ok = []
    for obs in OBSERVATIONS:
        try:
            check_trainable(env_id, obs=obs, base_url=base_url)
        except NotTrainableError:
            continue
        ok.append(obs)
    return ok
