#!/usr/bin/env bash
# Build (once) the venv that runs the veRL bridge's tests: tests/verl needs verl, whose pins
# (transformers <5.11, an older huggingface-hub, omegaconf 2.3, packaging 25) cannot live
# beside the suite's venv, so it gets its own, installed from scripts/verl.lock.
#   bash scripts/verl-venv.sh                 build or reuse the venv, print its python
#   bash scripts/verl-venv.sh --lock          re-resolve scripts/verl.lock (needs uv), then build
#   bash scripts/verl-venv.sh --test [ARGS]   build or reuse it, then run tests/verl in it
# ORS_GYM_VERL_VENV chooses the folder (default .verl-venv). torch is installed first with pip
# (the CPU build kept on disk) and held by a constraint, as scripts/setup.sh does. The venv keeps
# a stamp with the SHA-256 of the lock and of pyproject.toml; the install runs again when either
# changed, or when ors_gym (from this checkout) is not importable.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ORS_GYM_VERL_VENV:-.verl-venv}"
LOCK=scripts/verl.lock
TORCH="torch==2.13.0"
STAMP="$VENV/.ors-gym-verl.sha256"
MODE="${1:-build}"
[ $# -gt 0 ] && shift

constraint="$(mktemp)"
trap 'rm -f "$constraint"' EXIT
echo "$TORCH+cpu" > "$constraint"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m uv --version >/dev/null 2>&1 || "$PY" -m pip install --quiet uv

if [ "$MODE" = --lock ]; then
  # verl, ors_gym's own extras for the bridge (local: in-process environments; tokens: the
  # token-level episodes) and the test tools (trl: the tests' tiny tokenizer takes its chat template), resolved against the CPU torch kept on disk.
  wants="$(mktemp)"
  printf 'verl[verl-core]==0.9.1\nors-gym[local,tokens] @ file://%s\ntrl>=1.16\npytest>=8\npytest-timeout>=2.3\n' \
    "$(pwd -P)" > "$wants"
  "$PY" -m uv pip compile "$wants" --constraint "$constraint" --find-links /opt/wheels \
    --python-version 3.11 --no-emit-package ors-gym --no-header --quiet -o "$LOCK"
  rm -f "$wants"
  MODE=build
fi

wanted="$(cat "$LOCK" pyproject.toml | sha256sum | cut -d' ' -f1)"
here="$(pwd -P)"
importable() {
  (cd / && "$PY" -c 'import pathlib, sys, ors_gym, verl
sys.exit(pathlib.Path(ors_gym.__file__).resolve().parents[1] != pathlib.Path(sys.argv[1]))' "$here") \
    2>/dev/null
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] && importable; then
  echo "verl-venv: $VENV is up to date with $LOCK" >&2
else
  "$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install --quiet "$TORCH"
  "$PY" -m uv pip install --quiet --python "$PY" --constraint "$constraint" --find-links /opt/wheels -r "$LOCK"
  "$PY" -m uv pip install --quiet --python "$PY" --no-deps -e .
  echo "$wanted" > "$STAMP"
  echo "verl-venv: installed $LOCK into $VENV" >&2
fi

case "$MODE" in
  build) echo "$PY" ;;
  --test)
    export OPENREWARD_DISABLE_UPDATE_CHECK=1
    exec "$PY" -m pytest -q -p no:cacheprovider tests/verl "$@" ;;
  *) echo "verl-venv.sh: unknown mode '$MODE': use --lock, --test or nothing" >&2; exit 2 ;;
esac
