"""ORS episodes joined to capture sessions: each episode's tokens get its return.

:class:`CaptureEpisodes` wraps an ``OrsEnv`` (:class:`AsyncCaptureEpisodes` an
``AsyncOrsEnv``): every ``reset`` opens a capture session on the gateway, put in the
reset's ``info["capture"]`` (its base URLs and key, for an agent of one's own); for
a hosted deployment the session's ``OPENAI_BASE_URL``/``OPENAI_API_KEY``/
``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY`` also go to the environment's own agent
through ``env_overrides`` (beside any given). The episode's step rewards are kept;
when it ends (terminated or truncated) the session is closed with them, and the
trajectory, holding the ORS return, is the last step's ``info["trajectory"]`` and
is appended to ``trajectories``. A reset before the end closes the running session
as truncated (``max_turns``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, SupportsFloat

import gymnasium as gym

from ors_gym.gateway.gateway import Gateway, SessionInfo
from ors_gym.tokens import Trajectory
from ors_gym.tokens import stops as stop_reasons

__all__ = ["AsyncCaptureEpisodes", "CaptureEpisodes", "capture"]


class _Episodes:
    """The bookkeeping both wrappers share: the open session, its rewards, the results."""

    def __init__(self, core: Any, gateway: Gateway, overrides: bool | None) -> None:
        settings = core.settings
        hosted = getattr(settings, "deployment", None) is not None
        if overrides and not hosted:
            raise ValueError("overrides=True needs a hosted environment (deployment="
                             "'Namespace/name'): env_overrides reach a hosted deployment's "
                             "agent; point an agent of your own at info['capture'] instead")
        self.core = core
        self.gateway = gateway
        self.overrides = hosted if overrides is None else overrides
        self.given = dict(settings.plain_env_overrides() or {}) if hosted else {}
        self.session: SessionInfo | None = None
        self.rewards: list[float] = []
        self.trajectories: list[Trajectory] = []

    def open(self) -> SessionInfo:
        if self.session is not None:
            self.finish(stop_reasons.MAX_TURNS)
        info = self.gateway.open_session()
        if self.overrides:
            self.core.settings = dataclasses.replace(
                self.core.settings, env_overrides={**self.given, **info.env()})
        self.session, self.rewards = info, []
        return info

    def stepped(self, reward: SupportsFloat, terminated: bool, truncated: bool,
                info: dict[str, Any]) -> None:
        self.rewards.append(float(reward))
        if terminated or truncated:
            reason = info.get("stop_reason") or (
                stop_reason_of(terminated, truncated))
            info["trajectory"] = self.finish(str(reason))

    def finish(self, reason: str) -> Trajectory:
        assert self.session is not None
        sid, self.session = self.session.id, None
        traj = self.gateway.close_session(sid, self.rewards, stop_reason=reason)
        self.gateway.drop_session(sid)
        self.trajectories.append(traj)
        return traj


def stop_reason_of(terminated: bool, truncated: bool) -> str:
    """The stop reason of an episode that ended with these flags."""
    return stop_reasons.COMPLETED if terminated and not truncated else stop_reasons.MAX_TURNS


class CaptureEpisodes(gym.Wrapper):
    """``env`` (an ``OrsEnv``, maybe wrapped) with a capture session per episode."""

    def __init__(self, env: gym.Env, gateway: Gateway, *,
                 overrides: bool | None = None) -> None:
        super().__init__(env)
        core = getattr(env.unwrapped, "_core", None)
        if core is None or not hasattr(core, "settings"):
            raise TypeError(f"CaptureEpisodes wraps an OrsEnv; got {type(env.unwrapped).__name__}")
        self._episodes = _Episodes(core, gateway, overrides)

    @property
    def trajectories(self) -> list[Trajectory]:
        """The ended episodes' trajectories, in order."""
        return self._episodes.trajectories

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        session = self._episodes.open()
        observation, info = self.env.reset(seed=seed, options=options)
        return observation, {**info, "capture": session}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        self._episodes.stepped(reward, terminated, truncated, info)
        return observation, reward, terminated, truncated, info


class AsyncCaptureEpisodes:
    """``env`` (an ``AsyncOrsEnv``) with a capture session per episode: awaited ``reset``
    and ``step`` as the env's; every other attribute is the env's."""

    def __init__(self, env: Any, gateway: Gateway, *, overrides: bool | None = None) -> None:
        self.env = env
        self._episodes = _Episodes(env, gateway, overrides)

    @property
    def trajectories(self) -> list[Trajectory]:
        return self._episodes.trajectories

    async def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        session = self._episodes.open()
        observation, info = await self.env.reset(**kwargs)
        return observation, {**info, "capture": session}

    async def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = await self.env.step(action)
        info = dict(info)
        self._episodes.stepped(reward, terminated, truncated, info)
        return observation, reward, terminated, truncated, info

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def capture(env: Any, gateway: Gateway, *, overrides: bool | None = None) -> Any:
    """``env`` with a capture session per episode: :class:`CaptureEpisodes` for an
    ``OrsEnv`` (or a wrapper of one), :class:`AsyncCaptureEpisodes` for an
    ``AsyncOrsEnv``. ``overrides``: pass the session to a hosted environment's own agent
    through ``env_overrides`` (default: when the environment is hosted)."""
    if isinstance(env, gym.Env):
        return CaptureEpisodes(env, gateway, overrides=overrides)
    return AsyncCaptureEpisodes(env, gateway, overrides=overrides)
