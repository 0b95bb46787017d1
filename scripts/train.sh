#!/usr/bin/env bash
# Set up only what training needs (scripts/setup.sh train: ".[train]", no system package), then
# run the main job: train PPO on the bundled GridWorld, in-process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh train
. "${ORS_GYM_VENV:-.venv}/bin/activate"
export OPENREWARD_DISABLE_UPDATE_CHECK=1
ors-gym train "$@"
