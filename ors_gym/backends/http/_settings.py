"""How an HTTP backend is configured: where the server is, how patient to be.

``Settings`` is made once per backend from its ``HttpOptions`` and shared,
read-only, by the sans-IO operations and the driver. The URL helpers keep credentials out of every
URL that is shown: user-info becomes a basic-auth header instead.

A hosted environment (``deployment="Namespace/name"``) is reached as the SDK
reaches it: through the session host ``OPENREWARD_SESSION_URL``, else the
``sessions.`` subdomain of ``OPENREWARD_URL`` (default ``https://openreward.ai``),
with the key ``OPENREWARD_API_KEY``; arguments given explicitly win.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ors_gym.backends.http.options import HttpOptions
from ors_gym.errors import redact_url

__all__ = [
    "API_KEY_VAR",
    "DEFAULT_PLATFORM_URL",
    "WELL_KNOWN_SECRETS",
    "Settings",
    "Where",
    "configure",
    "hosted_location",
    "hosted_location_and_source",
    "key_domains",
    "origin",
    "platform_api_location",
    "platform_location",
    "split_base_url",
    "url_of",
]

#: The variable the SDK (and so ors_gym, for hosted environments) reads the API key from.
API_KEY_VAR = "OPENREWARD_API_KEY"
#: The platform's own address, as in the SDK (``openreward.client.DEFAULT_BASE_URL``).
DEFAULT_PLATFORM_URL = "https://openreward.ai"


@dataclass(frozen=True)
class Where:
    """The context an error names: server, environment, session, tool."""

    server: str | None = None
    env_name: str | None = None
    session_id: str | None = None
    tool: str | None = None

    def kw(self) -> dict[str, str | None]:
        """As ``OrsError`` keyword arguments."""
        return {
            "server": self.server,
            "env_name": self.env_name,
            "session_id": self.session_id,
            "tool": self.tool,
        }


@dataclass(frozen=True, kw_only=True)
class Settings(HttpOptions):
    """What the operations share: the options, and where the server is and how to
    authenticate there. The API key is never part of the repr.

    ``set_as`` says how the user set the options, so a message that tells them
    which one to change names it that way: ``"env"`` (``gym.make``/``OrsEnv``)
    or a backend class's name.
    """

    location: str
    api_key: str | None = field(default=None, repr=False)
    set_as: str = "HttpBackend"
    #: A hosted deployment (``Namespace/name``), sent as ``X-Deployment``; its sessions
    #: come from ``/create_session``. ``variant``: one environment class inside it.
    deployment: str | None = None
    variant: str | None = None
    #: Basic auth from the URL's user-info: sent to the server only.
    basic_auth: str | None = field(default=None, repr=False)
    #: A hosted deployment's: where ``location`` and the key came from, for errors
    #: (``"OPENREWARD_SESSION_URL"``...; ``key_source`` is empty when no key is set).
    location_source: str = "base_url"
    key_source: str = ""
    #: The OpenReward platform's API host (not an ORS server): its errors say so.
    platform_api: bool = False

    def how_to_set(self, name: str) -> str:
        """How the user raises option ``name``, as they set the others."""
        if self.set_as == "env":
            return f"gym.make(..., {name}=...) or OrsEnv({name}=...)"
        return f"{self.set_as}({name}=...)"

    def hosted_note(self) -> str:
        """For a hosted deployment's (or the platform API's) errors: the variables behind
        the host and the key."""
        key = (f"the API key from {self.key_source}" if self.key_source else
               f"no API key is set ({API_KEY_VAR} is empty; set it or pass api_key=...)")
        host = "platform API host" if self.platform_api else "session host"
        return f"{host} {self.location} from {self.location_source}; {key}"

    @property
    def hosted(self) -> bool:
        """Whether this is a hosted deployment (server-issued session ids, ``X-Deployment``)."""
        return self.deployment is not None


def split_base_url(base_url: str, owner: str = "HttpBackend") -> tuple[str, str | None]:
    """``base_url`` without user-info and trailing slash, and that user-info as a
    basic ``Authorization`` value (as httpx would send it), so no logged URL carries it."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(
            f"{owner} base_url must be an http(s) URL such as 'http://127.0.0.1:8080', "
            f"got {redact_url(str(base_url))!r}"
        )
    parts = urlsplit(base_url)
    basic_auth = None
    if parts.username or parts.password:
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        basic_auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return (redact_url(base_url) or base_url).rstrip("/"), basic_auth


def hosted_location(environ: Mapping[str, str] | None = None) -> str:
    """The session host the SDK uses: ``OPENREWARD_SESSION_URL``, else the ``sessions.``
    subdomain of ``OPENREWARD_URL`` (default the platform's own address)."""
    return hosted_location_and_source(environ)[0]


def hosted_location_and_source(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """:func:`hosted_location` and the variable it came from; a value without an http(s)
    scheme is refused with a ``ValueError`` naming its variable."""
    return platform_location("OPENREWARD_SESSION_URL", "sessions", environ)


def platform_api_location(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The platform's API host as the SDK finds it (``OPENREWARD_API_URL``, else the
    ``api.`` subdomain of ``OPENREWARD_URL``), and the variable it came from."""
    location, source = platform_location("OPENREWARD_API_URL", "api", environ)
    return location.rstrip("/"), source


def platform_location(
    variable: str, subdomain: str, environ: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """One of the platform's hosts as the SDK finds it, and where it came from: ``variable``,
    else the ``subdomain`` of ``OPENREWARD_URL`` (default the platform's own address); a
    value without an http(s) scheme is refused with a ``ValueError`` naming its variable."""
    env = os.environ if environ is None else environ
    for var in (variable, "OPENREWARD_URL"):
        value = env.get(var)
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"{var}={redact_url(value)!r} is not an http(s) URL; set it with its scheme, "
                f"e.g. {var}=https://{value.split('//')[-1].strip('/')}"
            )
    explicit = env.get(variable)
    if explicit:
        return explicit, variable
    parts = urlsplit(env.get("OPENREWARD_URL") or DEFAULT_PLATFORM_URL)
    source = (f"the {subdomain}. subdomain of OPENREWARD_URL" if env.get("OPENREWARD_URL") else
              f"the default ({variable} and OPENREWARD_URL are unset)")
    return urlunsplit(parts._replace(netloc=f"{subdomain}.{parts.netloc}")), source


#: The secret names whose domains the SDK's client knows (its ``WELL_KNOWN_SECRETS``,
#: copied so the HTTP wing needs no SDK; a test checks the copy against it).
_WELL_KNOWN: dict[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": ("api.openai.com",),
    "ANTHROPIC_API_KEY": ("api.anthropic.com",),
    "GEMINI_API_KEY": ("generativelanguage.googleapis.com",),
    "TAVILY_API_KEY": ("api.tavily.com",),
    "GOOGLE_API_KEY": ("generativelanguage.googleapis.com",),
    "COHERE_API_KEY": ("api.cohere.com",),
    "MISTRAL_API_KEY": ("api.mistral.ai",),
    "GROQ_API_KEY": ("api.groq.com",),
    "TOGETHER_API_KEY": ("api.together.xyz",),
    "REPLICATE_API_TOKEN": ("api.replicate.com",),
    "HUGGINGFACE_API_KEY": ("api-inference.huggingface.co", "huggingface.co"),
    "HF_TOKEN": ("huggingface.co", "api-inference.huggingface.co"),
    "HUGGING_FACE_HUB_TOKEN": ("huggingface.co", "api-inference.huggingface.co"),
    "PERPLEXITY_API_KEY": ("api.perplexity.ai",),
    "FIREWORKS_API_KEY": ("api.fireworks.ai",),
    "DEEPSEEK_API_KEY": ("api.deepseek.com",),
    "KAGGLE_KEY": ("www.kaggle.com",),
    "KAGGLE_USERNAME": ("www.kaggle.com",),
    "KAGGLE_API_KEY": ("www.kaggle.com",),
    "E2B_API_KEY": ("api.e2b.app",),
    "MODAL_TOKEN_ID": ("api.modal.com",),
    "MODAL_TOKEN_SECRET": ("api.modal.com",),
    "DAYTONA_API_KEY": ("app.daytona.io",),
}
WELL_KNOWN_SECRETS: dict[str, tuple[str, ...]] = {
    **_WELL_KNOWN,
    **{name.lower(): domains for name, domains in _WELL_KNOWN.items()},
    'gh_auth_token': (
        "github.com",
        "api.github.com",
        "uploads.github.com",
        "objects.githubusercontent.com",
        "raw.githubusercontent.com",
    ),
}


#: First-party services the SDK lets an environment use the user's key with.
_SERVICE_URLS = (("OPENREWARD_WEB_SEARCH_URL", "https://search.openreward.ai/search"),
                 ("OPENREWARD_WEB_FETCH_URL", "https://search.openreward.ai/fetch"))


def key_domains(location: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """Where a hosted environment may use the user's key, as the SDK's
    ``augment_secrets_with_api_key`` computes it: the session host, the API host,
    the first-party services, and their ``<first label>.openreward.internal`` twins."""
    env = os.environ if environ is None else environ
    platform = urlsplit(env.get("OPENREWARD_URL") or DEFAULT_PLATFORM_URL)
    api = env.get("OPENREWARD_API_URL") or urlunsplit(
        platform._replace(netloc=f"api.{platform.netloc}"))
    hosts: list[str] = []
    for url in (location, api, *(env.get(name) or default for name, default in _SERVICE_URLS)):
        host = urlsplit(url).hostname
        if host and host not in hosts:
            hosts.append(host)
    hosts += [f"{h.split('.')[0]}.openreward.internal" for h in hosts if h.count(".") >= 2]
    return hosts


def _check_deployment(deployment: Any, variant: Any, owner: str) -> None:
    if not isinstance(deployment, str) or not re.fullmatch(r"[^/\s]+(/[^/\s]+)?", deployment):
        raise ValueError(
            f"{owner} deployment must be 'Namespace/name' as shown on OpenReward, "
            f"got {deployment!r}"
        )
    if variant is not None and (not isinstance(variant, str) or not variant
                                or not re.fullmatch(r"[\w.-]+", variant)):
        raise ValueError(
            f"{owner} variant must be an environment name inside the deployment (letters, "
            f"digits, '_', '.', '-') or None, got {variant!r}"
        )


def configure(
    set_as: str,
    base_url: str | None,
    options: HttpOptions,
    *,
    api_key: str | None = None,
    deployment: str | None = None,
    variant: str | None = None,
    platform_api: bool = False,
) -> Settings:
    """The ``Settings`` of a backend made as ``set_as(base_url, ...)`` with ``options``.

    With ``deployment``, ``base_url`` and ``api_key`` default to the SDK's variables
    (see the module docstring), and so for the ``platform_api`` host; for a plain
    server nothing is read from the environment.
    """
    owner = "the env" if set_as == "env" else set_as
    sources: dict[str, str] = {}
    if platform_api:
        if not base_url:
            base_url, sources["location_source"] = platform_api_location()
        sources["key_source"] = "api_key" if api_key else API_KEY_VAR
        api_key = api_key or os.environ.get(API_KEY_VAR) or None
        if api_key is None:
            sources["key_source"] = ""
    elif deployment is not None:
        _check_deployment(deployment, variant, owner)
        if not base_url:
            base_url, sources["location_source"] = hosted_location_and_source()
        sources["key_source"] = "api_key" if api_key else API_KEY_VAR
        api_key = api_key or os.environ.get(API_KEY_VAR) or None
        if api_key is None:
            sources["key_source"] = ""
    elif variant is not None:
        raise ValueError(
            f"{owner}: variant={variant!r} needs deployment='Namespace/name'; for a plain "
            "server, name the environment with env_name instead"
        )
    if base_url is None:
        raise ValueError(
            f"{owner} needs base_url='http://host:port' (an ORS server) or "
            "deployment='Namespace/name' (a hosted environment)"
        )
    location, basic_auth = split_base_url(base_url, owner)
    values = {f.name: getattr(options, f.name) for f in fields(HttpOptions)}
    return Settings(location=location, set_as=set_as, basic_auth=basic_auth, api_key=api_key,
                    deployment=deployment, variant=variant,
                    location_source=sources.get("location_source", "base_url"),
                    key_source=sources.get("key_source", ""), platform_api=platform_api,
                    **values)


def url_of(location: str, path: str) -> str:
    """The absolute URL of a step's ``path`` (a path under ``location``, or a whole URL)."""
    return path if path.startswith(("http://", "https://")) else location + path


def origin(url: str) -> tuple[str, str, int | None]:
    """Scheme, host and port: what decides whether credentials may follow a redirect."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port
