"""Presets: the well-known harnesses, each as a :class:`~ors_gym.harness.Harness`.

- ``claude-code``: ``claude -p`` with ``--mcp-config`` (the ``{"mcpServers": ...}``
  JSON) and ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``;
- ``codex``: ``codex exec`` with ``CODEX_HOME`` holding a ``config.toml`` (the
  gateway as its model provider, ``[mcp_servers.ors]``);
- ``openai-agents``, ``pydantic-ai``, ``smolagents``: the Python SDKs, each a short
  script run by ``python`` (an interpreter whose environment holds the SDK).

A harness of one's own is a :class:`~ors_gym.harness.Harness` too (see the guide).
"""

from __future__ import annotations

from ors_gym.harness._scripts import SCRIPTS
from ors_gym.harness.spec import Harness

__all__ = ["PRESETS", "claude_code", "codex", "preset", "python_sdk"]

#: The variables Claude Code reads beside the model endpoint: no telemetry, no updates.
CLAUDE_CODE_ENV = {
    "ANTHROPIC_BASE_URL": "{anthropic_base_url}",
    "ANTHROPIC_API_KEY": "{api_key}",
    "ANTHROPIC_MODEL": "{model}",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
}

#: Codex's ``config.toml`` before its ``[mcp_servers.ors]`` table: the gateway as the
#: model provider (its key read from ``OPENAI_API_KEY``).
CODEX_HEADER = '''\
model = "{model}"
model_provider = "ors-gym"
approval_policy = "never"
sandbox_mode = "workspace-write"

[model_providers.ors-gym]
name = "ors-gym gateway"
base_url = "{openai_base_url}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
'''


def claude_code(*, executable: str = "claude", max_turns: int = 50) -> Harness:
    """Claude Code in print mode, its tools the ORS session's only (``mcp__ors``)."""
    return Harness(
        name="claude-code",
        command=(executable, "-p", "{prompt}", "--mcp-config", "{mcp_config}",
                 "--strict-mcp-config", "--allowedTools", "mcp__ors", "--model", "{model}",
                 "--max-turns", str(max_turns), "--output-format", "json"),
        mcp_config="json", mcp_config_path="mcp.json", env=CLAUDE_CODE_ENV)


def codex(*, executable: str = "codex") -> Harness:
    """Codex's ``exec`` mode, its home (``CODEX_HOME``) the episode's own."""
    return Harness(
        name="codex",
        command=(executable, "exec", "--skip-git-repo-check", "{prompt}"),
        mcp_config="toml", mcp_config_path="codex-home/config.toml",
        config_header=CODEX_HEADER,
        env={"CODEX_HOME": "{workdir}/codex-home", "OPENAI_API_KEY": "{api_key}"})


def python_sdk(name: str, *, python: str = "python") -> Harness:
    """One of the Python SDK harnesses (``openai-agents``, ``pydantic-ai``,
    ``smolagents``), its script run by ``python``."""
    if name not in SCRIPTS:
        raise ValueError(f"no Python SDK harness {name!r}; choose one of {sorted(SCRIPTS)}")
    script = f"ors_{name.replace('-', '_')}.py"  # not the SDK's own module name
    return Harness(name=name, command=(python, script, "{prompt}"),
                   files={script: SCRIPTS[name].replace("{", "{{").replace("}", "}}")})


#: The presets by name.
PRESETS = ("claude-code", "codex", *sorted(SCRIPTS))


def preset(name: str, *, python: str = "python", executable: str | None = None) -> Harness:
    """The preset called ``name`` (one of :data:`PRESETS`); ``python``: the interpreter of
    a Python SDK harness; ``executable``: Claude Code's or Codex's command."""
    if name == "claude-code":
        return claude_code(executable=executable or "claude")
    if name == "codex":
        return codex(executable=executable or "codex")
    if name in SCRIPTS:
        return python_sdk(name, python=python)
    raise ValueError(f"no harness preset {name!r}; choose one of {', '.join(PRESETS)}, or "
                     "give a command")
