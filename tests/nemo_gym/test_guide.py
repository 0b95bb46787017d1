"""The NeMo Gym guide (docs/guides/nemo-gym.md) runs: its Python snippets in page order (the
main suite only compiles them, without nemo-gym), its ``ors-gym`` commands against a live ORS
server, and its ``gym`` command lines are ones NeMo Gym's own parser accepts, the server
selector finding the config under ``ors-gym nemo-gym root``.

Needs nemo-gym, which has a venv of its own: ``bash scripts/nemo-gym-venv.sh --test``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip(
    "nemo_gym.cli.main",
    reason="nemo-gym has a venv of its own: bash scripts/nemo-gym-venv.sh --test",
)

from nemo_gym.cli.main import build_parser

from ors_gym.cli import main
from ors_gym.envs import BUNDLED
from ors_gym.nemo_gym import root
from ors_gym.serving import ServerThread
from tests._docs_snippets import DEMO_URL, ROOT, command_lines, snippets

PAGE = ROOT / "docs" / "guides" / "nemo-gym.md"


def gym_lines(page: Path) -> list[str]:
    """The ``gym`` command lines of the page's bash blocks, continuations joined."""
    text = page.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for command in block.replace("\\\n", " ").splitlines():
            command = command.split(" #")[0].strip()
            if command.startswith("gym "):
                found.append(command)
    return found


def test_the_guide_s_snippets_and_commands_run(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__guide__"}
    for snippet in snippets(PAGE):
        exec(compile(snippet.code, f"{PAGE}:{snippet.line}", "exec"), namespace)
    assert Path("rows.jsonl").read_text().count("\n") == 8
    with ServerThread([BUNDLED["Counter"]]) as ors:
        lines = command_lines(PAGE)
        assert len(lines) >= 4
        for line, command in lines:
            argv = shlex.split(command.replace(DEMO_URL, ors.url))[1:]
            assert main(argv) == 0, f"{PAGE}:{line}: {command}"
    assert Path("test.jsonl").read_text().count("\n") == 10  # Counter's test split


def test_the_guide_s_gym_commands_are_nemo_gym_s(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = gym_lines(PAGE)
    assert len(lines) >= 2
    monkeypatch.setenv("NEMO_GYM_EXTRA_ROOTS", str(root()))  # what --search-dir sets
    for command in lines:
        argv = shlex.split(command.replace('"$(ors-gym nemo-gym root)"', str(root())))[1:]
        args, overrides = build_parser().parse_known_args(argv)
        assert not [t for t in overrides if t.startswith("-")], command
        assert args.search_dir == [str(root())]
        translated = [t for flag in args._command.flags for t in flag.translate_to_hydra(args)]
        assert any("resources_servers/ors/configs/ors.yaml" in t for t in translated), translated
