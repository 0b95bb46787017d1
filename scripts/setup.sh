#!/usr/bin/env bash
# Create the venv (once) and install ors_gym with every extra the tests, notebooks and training use.
# torch is installed first, pinned to the CPU build this workplace keeps on disk; the package
# metadata does not pin it. `pip install -e ".[dev]"` runs only when something it installs has
# changed: the venv keeps a stamp holding the SHA-256 of pyproject.toml, and the install runs again
# when that hash differs or when ors_gym (from this checkout) is not importable. ORS_GYM_VENV
# chooses the venv folder (default .venv); a fresh folder always installs.
# The viewer's browser test needs Debian's chromium: installed with apt-get when missing and this
# runs as root (CI); otherwise the script says how, and that test is skipped with that reason.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ORS_GYM_VENV:-.venv}"
STAMP="$VENV/.ors-gym-setup.sha256"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
python -c "import torch" 2>/dev/null || {
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet "torch==2.13.0"
}

wanted="$(python -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' pyproject.toml)"
installed="$(cat "$STAMP" 2>/dev/null || true)"
# Imported from outside the checkout, so only an installed ors_gym counts, and only this one.
here="$(pwd -P)"
importable() {
  (cd / && python -c 'import pathlib, sys, ors_gym
sys.exit(pathlib.Path(ors_gym.__file__).resolve().parents[1] != pathlib.Path(sys.argv[1]))' "$here") \
    2>/dev/null
}
if [ "$wanted" = "$installed" ] && importable; then
  echo "setup: $VENV is up to date with pyproject.toml; skipping pip install"
else
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e ".[dev]"
  echo "$wanted" > "$STAMP"
fi

if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium (the viewer's browser test)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: chromium is missing (sudo apt-get install -y chromium); the browser test will skip"
  fi
fi
