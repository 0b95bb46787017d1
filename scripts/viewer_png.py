"""Make docs/viewer.png from a real run: ``python scripts/viewer_png.py [OUT.png]``.

Evaluates the scripted model on the bundled GridWorld and QA environments (as
``ors-gym eval ... --model scripted`` does), writes the viewer's page for their
trajectories with :func:`ors_gym.viewer.write_report`, and screenshots it with
Debian's headless ``chromium``. Run it again whenever the viewer's look changes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WINDOW = (1200, 813)


def make_report(folder: Path) -> Path:
    """Evaluate, join the runs' trajectories into one file, and write its report page."""
    from ors_gym.eval import evaluate
    from ors_gym.viewer import write_report

    parts = [("ors/GridWorld-v0", 4), ("ors/QA-v0", 2)]
    joined = folder / "scripted-eval.jsonl"
    with open(joined, "w", encoding="utf-8") as out:
        for env_id, episodes in parts:
            run = folder / env_id.split("/")[1]
            evaluate(env_id, "scripted", episodes=episodes, concurrency=2, out=run, report=False)
            out.write((run / "trajectories.jsonl").read_text(encoding="utf-8"))
    return Path(write_report(joined, folder / "report.html"))


def screenshot(page: Path, png: Path, window: tuple[int, int] = WINDOW) -> None:
    """``page`` as a PNG of ``window`` pixels, by headless chromium."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("viewer_png: chromium is missing (sudo apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--hide-scrollbars",
             f"--user-data-dir={profile}", f"--screenshot={png}",
             f"--window-size={window[0]},{window[1]}", page.resolve().as_uri()],
            check=True, capture_output=True, timeout=120,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "docs" / "viewer.png"))
    args = parser.parse_args(argv)
    png = Path(args.out).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        screenshot(make_report(Path(tmp)), png)
    print(f"viewer_png: wrote {png}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this checkout's ors_gym
    sys.exit(main())
