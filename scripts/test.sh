#!/usr/bin/env bash
# Set up for the suite (scripts/setup.sh test: every extra, the tools, chromium), then lint,
# type-check and run the whole test suite, slow tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
. "${ORS_GYM_VENV:-.venv}/bin/activate"
export OPENREWARD_DISABLE_UPDATE_CHECK=1
ruff check ors_gym tests benchmarks
mypy
python -m pytest -q -p no:cacheprovider "$@"
