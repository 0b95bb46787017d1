"""The HTML views: ``ors-gym view`` in a real headless Chromium, and the Jupyter fragments.

The browser test needs Debian's ``chromium`` (``scripts/setup.sh`` installs
it); it is skipped, saying so, where it is absent. It takes the screenshot
``docs/viewer.png`` the README shows (rewritten with ``ORS_GYM_UPDATE_DOCS=1``).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from ors_gym.cli import main
from ors_gym.eval import evaluate
from ors_gym.trajectories import read_trajectories
from ors_gym.viewer import env_html, episode_html, report_html, write_report
from ors_gym.viewer.transcript import has_error
from tests._browser import CHROMIUM, Browser
from tests._openai_server import OpenAIServer

DOCS = Path(__file__).resolve().parents[2] / "docs"
HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


def _hostile(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with untrusted markup in every text the viewer shows."""
    bad = copy.deepcopy(record)
    bad["prompt"] = HOSTILE
    bad["prompt_content"] = [{"type": "text", "text": HOSTILE}]
    bad["env_name"] = HOSTILE
    step = bad["steps"][0]
    step["message"] = HOSTILE
    step["tool_calls"][0]["arguments"] = {"answer": HOSTILE}
    step["tool_calls"][0]["name"] = "</pre>" + HOSTILE
    step["results"][0]["content"] = [{"type": "text", "text": HOSTILE},
                                     {"type": "image", "mime": "image/png", "shape": [4, 4, 3],
                                      "data": '"><script>window.pwned=3</script>'}]
    step["error_reason"] = "unknown_tool"
    return bad


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file mixing GridWorld (images), QA (reward 0), Math with an endpoint error, and a
    record full of hostile markup; episodes numbered in order."""
    root = tmp_path_factory.mktemp("viewer")
    evaluate("ors/GridWorld-v0", "scripted", episodes=3, concurrency=3, out=root / "grid",
             report=False)
    evaluate("ors/QA-v0", "scripted", episodes=2, concurrency=2, out=root / "qa", report=False)
    with OpenAIServer(fail={2: 500}) as srv:
        evaluate("ors/Math-v0", "math-model", srv.base_url, episodes=3, concurrency=1,
                 out=root / "math", max_retries=0, report=False)
    records = [r for part in ("grid", "qa", "math")
               for r in read_trajectories(root / part / "trajectories.jsonl")]
    records.append(_hostile(next(r for r in records if r["env_name"] == "math" and r["steps"])))
    for number, record in enumerate(records):
        record["episode"] = number
    path = root / "all.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_everything_untrusted_is_escaped(trajectories: Path) -> None:
    page = report_html(read_trajectories(trajectories))
    assert "<script>window.pwned" not in page and 'onerror="' not in page
    assert page.count("<script>") == 1  # the viewer's own
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page


def test_cli_view_writes_one_self_contained_file(
    trajectories: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    assert main(["view", str(trajectories), "-o", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    page = out.read_text()
    for remote in ("http://", "https://", "src=\"//"):
        assert remote not in page  # nothing fetched: images are data: URLs
    assert "default-src 'none'" in page
    assert main(["view", str(tmp_path / "missing.jsonl")]) == 2


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                    "(Debian: apt-get install -y chromium; scripts/setup.sh does it)")
def test_the_report_in_a_headless_browser(trajectories: Path, tmp_path: Path) -> None:
    records = read_trajectories(trajectories)
    images = sum(1 for r in records for item in [*r["prompt_content"],
                 *(c for s in r["steps"] for res in s["results"] for c in res["content"])]
                 if item.get("type") == "image" and item.get("data")
                 and not item["data"].startswith('"'))
    errors = sum(1 for r in records if has_error(r))
    assert 0 < errors < len(records) and images > 3
    report = write_report(trajectories, tmp_path / "report.html")
    with Browser() as page:
        page.open(report.resolve().as_uri())
        assert page.errors == []
        assert page.js("document.querySelectorAll('section.episode').length") == len(records)
        assert page.js("document.getElementById('shown').textContent") == str(len(records))
        assert page.js("document.querySelectorAll('script').length") == 1
        assert page.js("window.pwned === undefined")
        decoded = page.js("Promise.all(Array.from(document.querySelectorAll('img.frame'))"
                          ".map(i => i.decode().then(() => i.naturalWidth, () => 0)))")
        assert len(decoded) == images and all(width > 0 for width in decoded)

        order = ("Array.from(document.querySelectorAll('section.episode'))"
                 ".map(e => parseFloat(e.dataset.reward))")
        page.js("document.getElementById('sort-desc').click()")
        rewards = page.js(order)
        assert rewards == sorted(rewards, reverse=True) and rewards != page.js(
            "Array.from(document.querySelectorAll('section.episode')).map(e => 0)")
        page.js("document.getElementById('sort-asc').click()")
        assert page.js(order) == sorted(rewards)
        page.js("document.getElementById('sort-episode').click()")
        assert page.js("Array.from(document.querySelectorAll('section.episode'))"
                       ".map(e => +e.dataset.episode)") == list(range(len(records)))

        page.js("document.getElementById('only-errors').click()")
        visible = page.js("Array.from(document.querySelectorAll('section.episode'))"
                          ".filter(e => e.offsetParent !== null).map(e => e.dataset.error)")
        assert visible == ["1"] * errors
        assert page.js("document.getElementById('shown').textContent") == str(errors)
        page.js("document.getElementById('only-errors').click()")
        page.js("document.getElementById('sort-episode').click()")  # GridWorld frames first
        assert page.errors == []
        shot = page.screenshot(full_page=False)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "viewer.png").write_bytes(shot)
    # docs/viewer.png (the README's) is written when missing or asked for, so that a test run
    # does not leave a changed binary in the checkout each time (anti-aliasing varies a pixel).
    if not (DOCS / "viewer.png").exists() or os.environ.get("ORS_GYM_UPDATE_DOCS") == "1":
        DOCS.mkdir(exist_ok=True)
        (DOCS / "viewer.png").write_bytes(shot)


def test_jupyter_fragments(trajectories: Path) -> None:
    record = read_trajectories(trajectories)[0]
    html = episode_html(record)
    assert html.startswith('<div class="ors-view"><style>') and "data:image/png;base64," in html
    assert "move" in html and "final reward" in html
    env = gym.make("ors/GridWorld-v0")
    try:
        card = env_html(env)
    finally:
        env.close()
    for part in ("gridworld", "move", "direction", "train", "test", "LocalBackend"):
        assert part in card
    qa = gym.make("ors/QA-v0")
    try:
        assert "<code>answer</code>: a plain answer" in env_html(qa)
    finally:
        qa.close()


def test_envs_and_recorded_episodes_show_as_html_in_jupyter(tmp_path: Path) -> None:
    import asyncio

    from ors_gym import AsyncOrsEnv, OrsEnv
    from ors_gym.envs.gridworld import GridWorld
    from ors_gym.wrappers import RecordTrajectories

    env = OrsEnv(env_class=GridWorld)
    try:
        card = env._repr_html_()
        assert "gridworld" in card and "<code>move</code>" in card and "direction" in card
        recorded = RecordTrajectories(env, tmp_path / "t.jsonl", images="base64")
        recorded.reset(seed=0)
        recorded.step({"tool_calls": [{"name": "move", "arguments": {"direction": "down"}}]})
        recorded.close()
    finally:
        env.close()
    (episode,) = read_trajectories(tmp_path / "t.jsonl")
    assert isinstance(episode, dict)
    page = episode._repr_html_()
    assert "move" in page and "data:image/png;base64," in page

    async def async_card() -> tuple[str, str]:
        async with AsyncOrsEnv(env_class=GridWorld) as aenv:
            before = aenv._repr_html_()
            await aenv.discover()
            return before, aenv._repr_html_()

    before, after = asyncio.run(async_card())
    assert "discover" in before and "<code>move</code>" in after
