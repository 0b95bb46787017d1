#!/usr/bin/env bash
# Build (once) the venv that runs the veRL bridge's tests. verl pins transformers <5.11 and
# older huggingface-hub, omegaconf and packaging than the suite's venv holds, so tests/verl runs
# in a venv of its own, installed from requirements/verl.lock.
#   bash scripts/verl-venv.sh                 build it, or reuse it, and print its python
#   bash scripts/verl-venv.sh --test [ARGS]   the same, then run tests/verl in it (pytest ARGS)
#   bash scripts/verl-venv.sh --lock          resolve requirements/verl.lock again, then build
# ORS_GYM_VERL_VENV chooses its folder (default: ~/.cache/ors-gym/verl-venv); the rest is
# scripts/_bridge-venv.sh, shared with the other bridge.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=verl
VENV="${ORS_GYM_VERL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ors-gym/verl-venv}"
LOCK=requirements/verl.lock
WANTS=('verl[verl-core]==0.9.1' "ors-gym[local,tokens] @ file://$(pwd -P)" 'trl>=1.16' 'pytest>=8'
       'pytest-timeout>=2.3')
TESTS=(-o asyncio_default_fixture_loop_scope=function tests/verl)
. scripts/_bridge-venv.sh "$@"
