"""What a harness is to the runner: how it is started and what it is handed.

A :class:`Harness` is either a command line or a Python callable. A command's
arguments, variables and files are templates filled per episode
(:class:`Launch`): ``{prompt}``, ``{prompt_file}``, ``{mcp_url}``,
``{mcp_config}`` (the path of the MCP configuration written for it), ``{mcp_json}``,
``{mcp_toml}``, ``{model}``, ``{openai_base_url}``, ``{anthropic_base_url}``,
``{api_key}``, ``{workdir}``, ``{python}`` (this interpreter, which runs the
stdio relay). Every harness also gets ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``, ``ORS_MCP_URL``, ``ORS_MODEL`` and
``ORS_MCP_CONFIG`` in its environment. A literal brace in a template is doubled.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["Harness", "HarnessContext", "Launch"]

PromptVia = Literal["arg", "stdin", "file"]
#: The folder this ors_gym is imported from: the stdio relay imports the same one.
_ORS_GYM_ROOT = str(Path(__file__).resolve().parents[2])
ConfigForm = Literal["json", "toml"]


@dataclass(frozen=True)
class Launch:
    """One episode's values for a harness's templates (see the module)."""

    prompt: str
    mcp_url: str
    model: str
    openai_base_url: str
    anthropic_base_url: str
    api_key: str = field(repr=False)  # a credential: never shown
    workdir: str
    prompt_file: str
    mcp_config: str
    server_name: str = "ors"
    transport: Literal["http", "stdio"] = "http"

    def mcp_servers(self) -> dict[str, Any]:
        """The MCP configuration in the common shape, ``{"mcpServers": {name: ...}}``: a
        streamable-HTTP server by URL, or the stdio relay as a command."""
        if self.transport == "stdio":  # a harness may start it with a bare environment
            server: dict[str, Any] = {"command": sys.executable,
                                      "args": ["-m", "ors_gym.mcp", self.mcp_url],
                                      "env": {"PYTHONPATH": _ORS_GYM_ROOT}}
        else:
            server = {"type": "http", "url": self.mcp_url}
        return {"mcpServers": {self.server_name: server}}

    def mcp_toml(self) -> str:
        """The MCP configuration as Codex's ``[mcp_servers.<name>]`` TOML table."""
        server = self.mcp_servers()["mcpServers"][self.server_name]
        lines = [f"[mcp_servers.{self.server_name}]"]
        if "url" in server:
            lines.append(f"url = {json.dumps(server['url'])}")
        else:
            lines.append(f"command = {json.dumps(server['command'])}")
            lines.append(f"args = {json.dumps(server['args'])}")
            lines.append(f"env = {{ PYTHONPATH = {json.dumps(server['env']['PYTHONPATH'])} }}")
        return "\n".join(lines) + "\n"

    def values(self) -> dict[str, str]:
        """The template values."""
        return {
            "prompt": self.prompt, "prompt_file": self.prompt_file, "mcp_url": self.mcp_url,
            "mcp_config": self.mcp_config, "model": self.model,
            "openai_base_url": self.openai_base_url,
            "anthropic_base_url": self.anthropic_base_url, "api_key": self.api_key,
            "workdir": self.workdir, "python": sys.executable,
            "mcp_json": json.dumps(self.mcp_servers(), indent=2), "mcp_toml": self.mcp_toml(),
        }

    def variables(self) -> dict[str, str]:
        """The variables every harness gets (model endpoint and key, MCP endpoint)."""
        return {
            "OPENAI_BASE_URL": self.openai_base_url, "OPENAI_API_KEY": self.api_key,
            "ANTHROPIC_BASE_URL": self.anthropic_base_url, "ANTHROPIC_API_KEY": self.api_key,
            "ORS_MCP_URL": self.mcp_url, "ORS_MODEL": self.model,
            "ORS_MCP_CONFIG": self.mcp_config,
        }


@dataclass(frozen=True)
class HarnessContext:
    """What a Python-callable harness is handed: the prompt, the model endpoint and key
    (``variables``: as a command's environment gets them), and the MCP server as a
    URL and as the common ``{"mcpServers": ...}`` object."""

    prompt: str
    model: str
    mcp_url: str
    mcp_servers: dict[str, Any]
    variables: dict[str, str] = field(repr=False)  # holds the key: never shown
    workdir: str

    @property
    def openai_base_url(self) -> str:
        return self.variables["OPENAI_BASE_URL"]

    @property
    def api_key(self) -> str:
        return self.variables["OPENAI_API_KEY"]


#: A Python harness: called with the context, returns its final answer (or None).
HarnessCallable = Callable[[HarnessContext], Awaitable[str | None]]


@dataclass(frozen=True)
class Harness:
    """How to start one harness on an episode (see the module for the templates).

    ``command``: the argument templates (or ``call``: an async Python callable taking a
    :class:`HarnessContext`). ``prompt_via``: the task's prompt as an argument
    (``{prompt}`` in ``command``), on stdin, or in ``prompt_file`` (``{prompt_file}``).
    ``mcp_config``: the form of the MCP configuration written to ``mcp_config_path`` in
    the working directory (``"json"``: ``{"mcpServers": ...}``; ``"toml"``: Codex's
    ``[mcp_servers.<name>]``), after ``config_header`` (a template, e.g. Codex's model
    provider). ``transport``: the MCP server by URL (``"http"``) or as the stdio relay's
    command (``"stdio"``, for a harness that only starts commands). ``env``: more
    variables (templates); ``files``: more files to write (path in the working
    directory to template). ``server_name``: the MCP server's name in the
    configuration (a harness may prefix its tools with it).
    """

    name: str
    command: tuple[str, ...] = ()
    call: HarnessCallable | None = None
    prompt_via: PromptVia = "arg"
    prompt_file: str = "task.md"
    mcp_config: ConfigForm = "json"
    mcp_config_path: str = "mcp.json"
    config_header: str = ""
    transport: Literal["http", "stdio"] = "http"
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold a credential
    files: Mapping[str, str] = field(default_factory=dict)
    server_name: str = "ors"

    def __post_init__(self) -> None:
        if bool(self.command) == (self.call is not None):
            raise ValueError(f"harness {self.name!r} needs a command or a call, not both and "
                             "not neither: Harness(name, command=('my-agent', '{prompt}')) "
                             "or Harness(name, call=async_fn)")
        if self.prompt_via not in ("arg", "stdin", "file"):
            raise ValueError(f"prompt_via={self.prompt_via!r}; choose 'arg', 'stdin' or "
                             "'file'")
        if self.mcp_config not in ("json", "toml"):
            raise ValueError(f"mcp_config={self.mcp_config!r}; choose 'json' or 'toml'")
        if self.transport not in ("http", "stdio"):
            raise ValueError(f"transport={self.transport!r}; choose 'http' or 'stdio'")
        if self.prompt_via == "arg" and self.command and not any(
                "{prompt}" in a for a in self.command):
            raise ValueError(f"harness {self.name!r} takes its prompt as an argument, but no "
                             "argument holds {prompt}: add it, or set prompt_via='stdin' or "
                             "'file'")

    def argv(self, launch: Launch) -> list[str]:
        """The command line for one episode."""
        values = launch.values()
        return [_fill(a, values, f"command argument {a!r}") for a in self.command]

    def variables(self, launch: Launch) -> dict[str, str]:
        """The variables this harness gets beyond the inherited ones."""
        values = launch.values()
        return {**launch.variables(),
                **{k: _fill(v, values, f"variable {k}") for k, v in self.env.items()}}

    def config_text(self, launch: Launch) -> str:
        """The MCP configuration file's text."""
        header = _fill(self.config_header, launch.values(), "config_header")
        if self.mcp_config == "toml":
            between = "" if not header else "\n" if header.endswith("\n") else "\n\n"
            return header + between + launch.mcp_toml()
        return json.dumps(launch.mcp_servers(), indent=2) + "\n"

    def file_texts(self, launch: Launch) -> dict[str, str]:
        """The extra files, filled."""
        values = launch.values()
        return {path: _fill(text, values, f"file {path}") for path, text in self.files.items()}


def _fill(template: str, values: Mapping[str, str], what: str) -> str:
    try:
        return template.format_map(values)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"the harness's {what} is not a valid template ({exc}): its fields "
                         f"are {', '.join('{' + k + '}' for k in sorted(values))}; double a "
                         "literal brace") from None
