#!/usr/bin/env bash
# Set up for the suite (scripts/setup.sh test: every extra, the tools, chromium, the bridges'
# venvs), then lint, type-check and run the whole test suite (docs build and snippets included),
# slow tests included: tests/verl, tests/tinker and tests/nemo_gym in their venvs first, then
# everything else.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
. "${ORS_GYM_VENV:-.venv}/bin/activate"
export OPENREWARD_DISABLE_UPDATE_CHECK=1
ruff check ors_gym ors_gym_verifiers tests benchmarks docs
mypy
bash scripts/verl-venv.sh --test
bash scripts/tinker-venv.sh --test
bash scripts/nemo-gym-venv.sh --test
# Two workers, one test file each at a time (a file's module-scoped servers stay on one worker),
# handed out in the order tests/conftest.py gives: the files with the most slow tests first.
python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --no-loadscope-reorder "$@"
