#!/usr/bin/env bash
# Build (once) the venv that runs the Tinker bridge's tests. tinker-cookbook 0.5.8 caps
# transformers at 5.5.4, below the suite's venv (and 0.6.1 needs a tml-renderers release that
# PyPI does not have), so tests/tinker runs in a venv of its own, installed from
# requirements/tinker.lock. The tests never reach the Tinker service: a local model samples.
#   bash scripts/tinker-venv.sh                 build it, or reuse it, and print its python
#   bash scripts/tinker-venv.sh --test [ARGS]   the same, then run tests/tinker in it (pytest ARGS)
#   bash scripts/tinker-venv.sh --lock          resolve requirements/tinker.lock again, then build
# ORS_GYM_TINKER_VENV chooses its folder (default: ~/.cache/ors-gym/tinker-venv); the rest is
# scripts/_bridge-venv.sh, shared with the other bridge.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=tinker
VENV="${ORS_GYM_TINKER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ors-gym/tinker-venv}"
LOCK=requirements/tinker.lock
WANTS=("ors-gym[local,tinker] @ file://$(pwd -P)" 'trl>=1.16' 'pytest>=8' 'pytest-timeout>=2.3')
TESTS=(tests/tinker)
. scripts/_bridge-venv.sh "$@"
