"""The presets for harnesses not installed here (Claude Code, Codex) are checked against the
harness guide: the configuration files and variables the guide shows are what the presets
write, parsed as JSON and TOML; the Python SDK presets write their scripts, which compile."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

from ors_gym.harness import PRESETS, Launch, preset
from ors_gym.harness.presets import CLAUDE_CODE_ENV

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "harness.md"


def _launch(tmp: str = "/tmp/ep", transport: str = "http") -> Launch:
    return Launch(prompt="Make it equal 3.", mcp_url="http://127.0.0.1:40001/mcp/ep1",
                  model="my-model", openai_base_url="http://127.0.0.1:40000/s/SID/v1",
                  anthropic_base_url="http://127.0.0.1:40000/s/SID", api_key="sk-session",
                  workdir=tmp, prompt_file=f"{tmp}/task.md", mcp_config=f"{tmp}/mcp.json",
                  transport=transport)  # type: ignore[arg-type]


def _block(language: str, after: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(rf"{re.escape(after)}.*?```{language}\n(.*?)```", text, re.DOTALL)
    assert found, f"the guide has no {language} block after {after!r}"
    return found.group(1)


def test_claude_codes_configuration_is_the_guides() -> None:
    harness = preset("claude-code")
    launch = _launch()
    assert json.loads(harness.config_text(launch)) == json.loads(
        _block("json", "### Claude Code"))
    argv = harness.argv(launch)
    assert argv[:3] == ["claude", "-p", "Make it equal 3."]
    assert argv[argv.index("--mcp-config") + 1] == "/tmp/ep/mcp.json"
    variables = harness.variables(launch)
    assert variables["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:40000/s/SID"
    assert variables["ANTHROPIC_API_KEY"] == "sk-session"
    guide = GUIDE.read_text(encoding="utf-8")
    for name, value in CLAUDE_CODE_ENV.items():  # each variable the preset sets is named
        assert f"`{name}" in guide, name
        if not value.startswith("{"):
            assert f"`{name}={value}`" in guide
    assert " ".join(harness.command) in guide.replace("\n", " ")  # the command line, as shown


def test_codexs_configuration_is_the_guides() -> None:
    harness = preset("codex")
    launch = _launch()
    written = tomllib.loads(harness.config_text(launch))
    assert written == tomllib.loads(_block("toml", "### Codex"))
    assert written["model_providers"][written["model_provider"]]["base_url"] == (
        launch.openai_base_url)
    assert written["mcp_servers"]["ors"] == {"url": launch.mcp_url}
    assert harness.variables(launch)["CODEX_HOME"] == "/tmp/ep/codex-home"
    assert harness.mcp_config_path == "codex-home/config.toml"
    assert harness.argv(launch) == ["codex", "exec", "--skip-git-repo-check",
                                    "Make it equal 3."]


@pytest.mark.parametrize("name", ["openai-agents", "pydantic-ai", "smolagents"])
def test_the_python_sdk_presets_write_scripts_that_compile(name: str) -> None:
    harness = preset(name, python=sys.executable)
    ((path, text),) = harness.file_texts(_launch()).items()
    compile(text, path, "exec")
    assert harness.argv(_launch()) == [sys.executable, path, "Make it equal 3."]
    assert not path.startswith(name.replace("-", "_"))  # never shadows the SDK's module


def test_presets_are_named() -> None:
    assert set(PRESETS) == {"claude-code", "codex", "openai-agents", "pydantic-ai",
                            "smolagents"}
    with pytest.raises(ValueError, match="no harness preset 'nope'"):
        preset("nope")
    assert "sk-session" not in repr(_launch())  # the key is never shown


def test_a_stdio_server_in_codexs_toml_carries_its_command() -> None:
    import dataclasses

    harness = dataclasses.replace(preset("codex"), transport="stdio")
    written = tomllib.loads(harness.config_text(_launch(transport="stdio")))
    server = written["mcp_servers"]["ors"]
    assert server["command"] == sys.executable
    assert server["args"] == ["-m", "ors_gym.mcp", "http://127.0.0.1:40001/mcp/ep1"]
    assert (Path(server["env"]["PYTHONPATH"]) / "ors_gym" / "mcp").is_dir()
