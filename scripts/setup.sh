#!/usr/bin/env bash
# Create .venv (once) and install ors_gym with every extra the tests, notebooks and training use.
# torch is installed first, pinned to the CPU build this workplace keeps on disk; the package
# metadata does not pin it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ORS_GYM_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
python -c "import torch" 2>/dev/null || python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet -e ".[dev]"
