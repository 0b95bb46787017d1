"""``EnvSettings``: the options every ORS env takes, declared and checked once.

``OrsEnv``, ``AsyncOrsEnv`` and ``OrsVectorEnv`` take the same keyword options
(step rules, episode limits, credentials, backend options); each builds one
``EnvSettings`` from them, so an option is added in one place and a bad value
gets the same clear error everywhere.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ors_gym._weights import check_weights
from ors_gym.backends.http.options import HttpOptions, check_names, option_names
from ors_gym.families import check_tool_format
from ors_gym.observations import DEFAULT_MAX_PIXELS
from ors_gym.secret import Secret, reveal, with_domains

__all__ = ["EnvSettings", "NoToolCallPolicy", "OnErrorPolicy", "preflight", "register_preflight"]

NoToolCallPolicy = Literal["nudge", "terminate", "truncate", "error"]
OnErrorPolicy = Literal["raise", "truncate"]


@dataclass(frozen=True)
class EnvSettings:
    """What an env does with actions, failures and observations, and how it reaches its backend.

    - ``split``: the split tasks are drawn from (default ``train``, else the first listed);
    - ``max_steps`` (alias ``max_episode_steps``): truncate an episode after this many steps;
    - ``no_tool_call``: what an action without tool calls does when the environment has
      no ``@terminal`` tool: ``"nudge"`` (an observation asking for a tool call),
      ``"terminate"``, ``"truncate"`` or ``"error"`` (raise ``OrsActionError``);
    - ``on_error``: ``"raise"`` infrastructure failures, or ``"truncate"`` the episode;
    - ``error_reward``: the reward of an agent mistake (unknown tool, invalid input);
    - ``image_size`` ``(H, W)``: resize images to a fixed shape;
      ``max_image_pixels``: refuse larger images (a note in the text instead);
    - ``max_calls_per_step``: tool calls run per step at most;
    - ``api_key``, ``secrets``: credentials sent to the server (never logged or shown);
      a secret is a value, or ``(value, allowed_domains)``: the domains a hosted
      environment may send it to (well-known names such as ``OPENAI_API_KEY`` get theirs);
    - ``http``: the HTTP backend's options (``HttpOptions``: ``timeout``,
      ``call_timeout``, ``max_retries``, ``setup_timeout``, ``keepalive_interval``...),
      each also an env option by its own name (``OrsEnv(call_timeout=60)``); an HTTP
      option set for an in-process env is ignored;
    - ``deployment`` (``"Namespace/name"``) and ``variant``: a hosted OpenReward
      environment, reached as the SDK reaches it (the session host and
      ``OPENREWARD_API_KEY`` from the environment unless ``base_url``/``api_key`` are
      given);
    - ``toolset``: a session toolset bound to every episode
      (``openreward.toolsets.BUILTIN_TOOLSETS``, e.g. ``"codex"``);
    - ``tool_format``: the model family whose raw completion text a str action is
      (``"qwen3.5"``, ``"glm-4.5"``, ``"gpt-oss"``...: :data:`ors_gym.families.FAMILIES`),
      read by that family's rules (its calls, its reasoning kept off the env); None reads
      Hermes-style ``<tool_call>`` JSON and bare JSON calls.
    - ``env_overrides``: a hosted deployment's environment variables set for each
      session (``OPENAI_BASE_URL``...: the environment's own model calls go to the
      trainer's endpoint); never logged or shown;
    - ``check_secrets``: before a hosted env's first session, ask the platform which
      secrets the deployment needs and raise naming those not given;
    - ``task_weights``: one weight per task index of the split; each reset draws its
      task with them (``ors_gym.platform.task_weights`` makes them from difficulty).
    """

    split: str | None = None
    max_steps: int | None = None
    no_tool_call: NoToolCallPolicy = "nudge"
    on_error: OnErrorPolicy = "raise"
    error_reward: float = 0.0
    image_size: tuple[int, int] | None = None
    max_image_pixels: int = DEFAULT_MAX_PIXELS
    max_calls_per_step: int = 16
    api_key: Secret | None = field(default=None, repr=False)
    secrets: Mapping[str, Secret | tuple[Secret, tuple[str, ...]]] | None = field(
        default=None, repr=False)
    http: HttpOptions = field(default_factory=HttpOptions)
    deployment: str | None = None
    variant: str | None = None
    toolset: str | None = None
    tool_format: str | None = None
    env_overrides: Mapping[str, Secret] | None = field(default=None, repr=False)
    check_secrets: bool = False
    task_weights: tuple[float, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.no_tool_call not in ("nudge", "terminate", "truncate", "error"):
            raise ValueError(
                f"no_tool_call={self.no_tool_call!r}; choose 'nudge', 'terminate', 'truncate' "
                "or 'error'"
            )
        if self.on_error not in ("raise", "truncate"):
            raise ValueError(f"on_error={self.on_error!r}; choose 'raise' or 'truncate'")
        if self.max_steps is not None and (
            isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int)
            or self.max_steps < 1
        ):
            raise ValueError(f"max_steps must be a positive int or None, got {self.max_steps!r}")
        if isinstance(self.max_calls_per_step, bool) or not isinstance(
            self.max_calls_per_step, int
        ) or self.max_calls_per_step < 1:
            raise ValueError(
                f"max_calls_per_step must be a positive int, got {self.max_calls_per_step!r}"
            )
        object.__setattr__(self, "error_reward", float(self.error_reward))
        if self.api_key is not None and not isinstance(self.api_key, Secret):
            object.__setattr__(self, "api_key", Secret(str(self.api_key)))
        if self.secrets is not None:
            if not isinstance(self.secrets, Mapping):
                raise TypeError(
                    f"secrets must be a dict of str to str, got {type(self.secrets).__name__}"
                )
            object.__setattr__(self, "secrets", {
                str(k): _secret_entry(str(k), v) for k, v in self.secrets.items()})
        if not isinstance(self.http, HttpOptions):
            raise TypeError(f"http must be an HttpOptions, got {type(self.http).__name__}")
        for name in ("deployment", "variant", "toolset"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError(f"{name} must be a non-empty str or None, got {value!r}")
        if self.tool_format is not None:
            check_tool_format(self.tool_format)
        if self.variant is not None and self.deployment is None:
            raise ValueError(
                f"variant={self.variant!r} needs deployment='Namespace/name'; for a plain "
                "server name the environment with env_name"
            )
        self._check_platform_options()

    def _check_platform_options(self) -> None:
        if self.env_overrides is not None:
            if self.deployment is None:
                raise ValueError("env_overrides needs deployment='Namespace/name': they set "
                                 "a hosted environment's variables")
            if not isinstance(self.env_overrides, Mapping) or not all(
                    isinstance(k, str) and k for k in self.env_overrides):
                raise TypeError("env_overrides must be a dict of variable names to str values, "
                                "e.g. {'OPENAI_BASE_URL': 'http://trainer:8000/v1'}")
            object.__setattr__(self, "env_overrides", {
                k: v if isinstance(v, Secret) else Secret(str(v))
                for k, v in self.env_overrides.items()
            })
        if self.check_secrets and self.deployment is None:
            raise ValueError("check_secrets needs deployment='Namespace/name': it asks the "
                             "platform what a hosted environment needs")
        if self.task_weights is not None:
            object.__setattr__(self, "task_weights", check_weights(self.task_weights))

    @classmethod
    def from_options(cls, options: Mapping[str, Any], **defaults: Any) -> EnvSettings:
        """Settings from an env's keyword options; unknown names get a did-you-mean error.

        ``defaults`` are used where ``options`` says nothing (``OrsVectorEnv``
        truncates on errors by default). ``max_episode_steps`` (what
        ``gym.make`` passes for a spec's step limit) is ``max_steps`` where that
        is not given. The HTTP options are given by name (``call_timeout=60``),
        or together as ``backend_options={...}`` (a dict or an ``HttpOptions``).
        """
        given = {**defaults, **options}
        alias = given.pop("max_episode_steps", None)
        if given.get("max_steps") is None and alias is not None:
            given["max_steps"] = alias
        http = {name: given.pop(name) for name in list(given) if name in option_names()}
        grouped = given.pop("backend_options", None) or {}
        base = grouped if isinstance(grouped, HttpOptions) else None
        if base is None:
            if not isinstance(grouped, Mapping):
                raise TypeError("backend_options must be a dict of HTTP options or an "
                                f"HttpOptions, got {type(grouped).__name__}")
            check_names(grouped, "backend_options entry")
            both = sorted(set(grouped) & set(http))
            if both:
                raise TypeError(f"{', '.join(both)} given both by name and in backend_options; "
                                "give each option once")
            http = {**grouped, **http}
        known = {f.name for f in fields(cls)} - {"http"}
        unknown = sorted(set(given) - known)
        if unknown:
            names = known | option_names() | {"max_episode_steps", "backend_options"}
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, names, n=1)
                hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise TypeError(
                f"unknown env option(s) {', '.join(hints)}; the options are: "
                f"{', '.join(sorted(names))}"
            )
        return cls(http=HttpOptions.of(base, **http), **given)

    def plain_secrets(self) -> dict[str, str | tuple[str, list[str]]] | None:
        """The secrets as plain strings (with their allowed domains, where given), for the
        backend (never for display)."""
        if not self.secrets:
            return None
        return {k: (str(reveal(v[0])), list(v[1])) if isinstance(v, tuple) else str(reveal(v))
                for k, v in self.secrets.items()}

    def plain_env_overrides(self) -> dict[str, str] | None:
        """The env overrides as plain strings, for the backend (never for display)."""
        if not self.env_overrides:
            return None
        return {k: str(reveal(v)) for k, v in self.env_overrides.items()}

    @property
    def remote(self) -> bool:
        """Whether the env talks to a hosted deployment (an HTTP backend without base_url)."""
        return self.deployment is not None


def _secret_entry(name: str, value: Any) -> Secret | tuple[Secret, tuple[str, ...]]:
    """A secret option's value as a ``Secret``, or ``(Secret, domains)`` when given as
    ``(value, allowed_domains)``."""
    plain, domains = with_domains(value, f"secrets[{name!r}]")
    secret = plain if isinstance(plain, Secret) else Secret(str(plain))
    return secret if domains is None else (secret, domains)


#: Checks an env runs before its first request (before any session id is asked for),
#: registered by the package that makes them: ``ors_gym.platform`` registers the
#: required-secrets preflight of ``check_secrets``. Each decides from the settings
#: whether it applies.
_PREFLIGHTS: list[Callable[[EnvSettings], Awaitable[None]]] = []


def register_preflight(check: Callable[[EnvSettings], Awaitable[None]]) -> None:
    """Add ``check`` to what ``preflight`` runs (once, however often it is registered)."""
    if check not in _PREFLIGHTS:
        _PREFLIGHTS.append(check)


async def preflight(settings: EnvSettings) -> None:
    """Run the registered checks for an env with ``settings``; one raises to stop it
    before its first request."""
    for check in _PREFLIGHTS:
        await check(settings)
