"""The one small interface every backend implements, documented once, on ``AsyncBackend``.

A backend moves ORS messages; it knows nothing about Gym spaces. The envs talk
only to these protocols, so the HTTP and in-process backends are
interchangeable and one test suite runs against both. ``AsyncBackend`` is the
core (``AsyncOrsEnv`` and ``OrsVectorEnv`` await it); ``Backend`` is the same
interface blocking, for ``OrsEnv`` and for scripts (``backends._face`` writes
it once over any ``AsyncBackend``).

Session methods take the environment name and the session id; a backend may
keep per-session state (the keepalive set, an in-process instance) keyed by id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict, Unpack, runtime_checkable

from ors_gym.protocol import Block, CallResult, GroupScore, ListToolsOutput, Message, Split
from ors_gym.secret import with_domains

__all__ = [
    "AsyncBackend", "Backend", "Secrets", "SessionArgs", "check_session_args", "secret_values",
]


#: Per-session secrets: a name to its value, or to ``(value, allowed_domains)``.
Secrets = Mapping[str, "str | tuple[str, Sequence[str]]"]


class SessionArgs(TypedDict, total=False):
    """The keywords of ``create_session``: which task a session is for, and its setup.

    Give either ``task_spec`` or ``split`` and ``index``; every key may be left out
    or given as None. Declared once here, taken as ``**kwargs`` by every backend.
    """

    task_spec: Mapping[str, Any] | None
    """The task itself, as the environment's tasks look (a JSON object)."""
    split: str | None
    """The split the task is in (with ``index``)."""
    index: int | None
    """The task's position in ``split``."""
    secrets: Secrets | None
    """Per-session secrets, e.g. an API key the task's tools use: a name to its value, or
    to ``(value, allowed_domains)``, the domains a hosted environment may send it to (see
    ``secret_values``)."""
    toolset: str | None
    """A session toolset's name (``openreward.toolsets.BUILTIN_TOOLSETS``): its tools join
    the session's and its terminal tool, if any, replaces the environment's. Callers
    pass it only when not None, so backends without it keep working."""
    env_overrides: Mapping[str, str] | None
    """A hosted session's environment variables (sent with ``/create_session`` as the
    SDK sends them); passed only when not None, and only to hosted HTTP backends."""


_ARG_KEYS = tuple(SessionArgs.__annotations__)


def check_session_args(kwargs: SessionArgs) -> None:
    """Refuse what ``create_session`` cannot take: a keyword that is not ``SessionArgs``'s
    (TypeError naming it), a task given twice or not at all (ValueError), a toolset
    that is no name (TypeError)."""
    unknown = [key for key in kwargs if key not in _ARG_KEYS]
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        plural = "s" if len(unknown) > 1 else ""
        raise TypeError(
            f"create_session() got an unexpected keyword argument{plural} {names}; "
            f"its keywords are {', '.join(_ARG_KEYS)} (see SessionArgs)"
        )
    task_spec, split, index = kwargs.get("task_spec"), kwargs.get("split"), kwargs.get("index")
    if (task_spec is None) == (split is None and index is None):
        raise ValueError(
            "create_session needs either task_spec=... or split=... and index=..., "
            "not both and not neither"
        )
    if task_spec is None and (split is None or index is None):
        raise ValueError("create_session needs both split=... and index=... together")
    toolset = kwargs.get("toolset")
    if toolset is not None and (not isinstance(toolset, str) or not toolset):
        raise TypeError(f"toolset must be a toolset's name (a str) or None, got {toolset!r}")


def secret_values(secrets: Secrets | None) -> dict[str, str]:
    """The secrets' plain values (what an environment's constructor receives), after
    checking each maps a str name to a str value or to ``(value, [domain, ...])``."""
    plain: dict[str, str] = {}
    for key, entry in (secrets or {}).items():
        value, _ = with_domains(entry, f"secret {key!r}")
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                "secrets must map str names to str values (or to (value, allowed_domains)), "
                f"e.g. {{'OPENAI_API_KEY': 'sk-...'}}; got a {type(value).__name__} value for "
                f"a {type(key).__name__} key"
            )
        plain[key] = value
    return plain


@runtime_checkable
class AsyncBackend(Protocol):
    """Discovery, session lifecycle and tool calls against ORS environments, awaited:
    what ``AsyncOrsEnv`` and ``OrsVectorEnv`` drive."""

    #: Where the environments live, for messages: a URL, or ``"in-process"``.
    location: str

    # -- discovery (no session) ------------------------------------------------
    async def list_environments(self) -> list[str]:
        """Environment names, lower-cased; the first is the default."""
        ...

    async def tools(self, env_name: str) -> ListToolsOutput:
        """The environment's shared tools and its terminal tool."""
        ...

    async def splits(self, env_name: str) -> list[Split]:
        """The task splits, in the server's order."""
        ...

    async def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        """Every task of ``split``; raises OrsRequestError for index-only environments."""
        ...

    async def num_tasks(self, env_name: str, split: str) -> int:
        """How many tasks ``split`` has."""
        ...

    async def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split`` (negative counts from the end)."""
        ...

    async def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        """Tasks ``start:stop`` of ``split``, with Python slice rules."""
        ...

    # -- sessions ---------------------------------------------------------------
    async def create_session(
        self,
        env_name: str,
        **kwargs: Unpack[SessionArgs],
    ) -> str:
        """Open a session (one episode) for a task; returns its id.

        ``kwargs`` (``SessionArgs``): either ``task_spec`` or ``split`` and ``index``,
        and optionally ``secrets`` and ``toolset``. Another keyword is a TypeError.
        """
        ...

    async def prompt(self, env_name: str, session_id: str) -> list[Block]:
        """The first observation, as blocks. Ask once per episode."""
        ...

    async def messages(self, env_name: str, session_id: str) -> list[Message]:
        """The prompt as a role-tagged conversation (``/prompt`` wrapped on old servers)."""
        ...

    async def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        """Shared tools plus this task's own tools."""
        ...

    async def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> CallResult:
        """Run one tool call; agent mistakes come back as ``RunToolError``."""
        ...

    async def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> list[GroupScore]:
        """Score a group of candidate trajectories for this session's task (GRPO-style)."""
        ...

    async def delete_session(self, session_id: str) -> None:
        """End the session; idempotent, never raises for an already-gone session."""
        ...

    async def ping(self, session_id: str) -> None:
        """Keep the session alive; raises OrsSessionExpired once it is gone."""
        ...

    async def probe(self) -> None:
        """Raise OrsConnectionError if the backend cannot be reached (a quick health check)."""
        ...

    async def aclose(self) -> None:
        """Release connections and background tasks; deletes open sessions."""
        ...


@runtime_checkable
class Backend(Protocol):
    """``AsyncBackend``, blocking: each method runs its coroutine to the result (same
    arguments, results and errors; see ``AsyncBackend`` for what each does), and
    ``close`` is ``aclose``. ``HttpBackend`` and ``LocalBackend`` are this."""

    location: str

    # -- discovery (no session) ------------------------------------------------
    def list_environments(self) -> list[str]:
        ...

    def tools(self, env_name: str) -> ListToolsOutput:
        ...

    def splits(self, env_name: str) -> list[Split]:
        ...

    def tasks(self, env_name: str, split: str) -> list[dict[str, Any]]:
        ...

    def num_tasks(self, env_name: str, split: str) -> int:
        ...

    def task(self, env_name: str, split: str, index: int) -> dict[str, Any]:
        ...

    def task_range(
        self, env_name: str, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        ...

    # -- sessions ---------------------------------------------------------------
    def create_session(self, env_name: str, **kwargs: Unpack[SessionArgs]) -> str:
        ...

    def prompt(self, env_name: str, session_id: str) -> list[Block]:
        ...

    def messages(self, env_name: str, session_id: str) -> list[Message]:
        ...

    def task_tools(self, env_name: str, session_id: str) -> ListToolsOutput:
        ...

    def call(
        self, env_name: str, session_id: str, name: str, arguments: Mapping[str, Any]
    ) -> CallResult:
        ...

    def score_group(
        self, env_name: str, session_id: str, candidates: Sequence[Mapping[str, Any]]
    ) -> list[GroupScore]:
        ...

    def delete_session(self, session_id: str) -> None:
        ...

    def ping(self, session_id: str) -> None:
        ...

    def probe(self) -> None:
        ...

    def close(self) -> None:
        ...
