#!/usr/bin/env bash
# Build (once) the venv that runs the veRL bridge's tests. verl pins transformers <5.11 and
# older huggingface-hub, omegaconf and packaging than the suite's venv holds, so tests/verl runs
# in a venv of its own, installed from requirements/verl.lock:
#   bash scripts/verl-venv.sh                 build it, or reuse it, and print its python
#   bash scripts/verl-venv.sh --test [ARGS]   the same, then run tests/verl in it (pytest ARGS)
#   bash scripts/verl-venv.sh --lock          resolve requirements/verl.lock again, then build
# The venv holds the lock only (verl, the local and tokens extras' libraries, trl for the tests'
# tokenizer, pytest), not ors_gym, which the tests import from this checkout: one venv serves
# every checkout, and it is built again only when the lock changes (a stamp holds its SHA-256).
# ORS_GYM_VERL_VENV chooses its folder (default: ~/.cache/ors-gym/verl-venv). torch is installed
# first with pip (the CPU build kept on disk) and held by a constraint, as scripts/setup.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ORS_GYM_VERL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ors-gym/verl-venv}"
LOCK=requirements/verl.lock
TORCH="torch==2.13.0"
STAMP="$VENV/.ors-gym-verl.sha256"
MODE="${1:-build}"
[ $# -gt 0 ] && shift

constraint="$(mktemp)"
trap 'rm -f "$constraint"' EXIT
echo "$TORCH+cpu" > "$constraint"

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m uv --version >/dev/null 2>&1 || "$PY" -m pip install --quiet uv

if [ "$MODE" = --lock ]; then
  # verl with its runtime set, ors_gym's extras for the bridge (local: in-process environments;
  # tokens: token-level episodes), trl (the tests' tokenizer takes its chat template) and the
  # test tools, resolved against the CPU torch kept on disk.
  wants="$(mktemp)"
  printf '%s\n' 'verl[verl-core]==0.9.1' "ors-gym[local,tokens] @ file://$(pwd -P)" \
    'trl>=1.16' 'pytest>=8' 'pytest-timeout>=2.3' > "$wants"
  "$PY" -m uv pip compile "$wants" --constraint "$constraint" --find-links /opt/wheels \
    --python-version 3.11 --no-emit-package ors-gym --no-annotate --no-header --quiet \
    -o "$LOCK"
  rm -f "$wants"
  MODE=build
fi

wanted="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
  echo "verl-venv: $VENV is up to date with $LOCK" >&2
else
  "$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install --quiet "$TORCH"
  "$PY" -m uv pip install --quiet --python "$PY" --constraint "$constraint" \
    --find-links /opt/wheels -r "$LOCK"
  echo "$wanted" > "$STAMP"
  echo "verl-venv: installed $LOCK into $VENV" >&2
fi

case "$MODE" in
  build) echo "$PY" ;;
  --test)
    export OPENREWARD_DISABLE_UPDATE_CHECK=1
    export PYTHONPATH="$(pwd -P)${PYTHONPATH:+:$PYTHONPATH}"
    exec "$PY" -m pytest -q -p no:cacheprovider -o asyncio_default_fixture_loop_scope=function \
      tests/verl "$@" ;;
  *) echo "verl-venv.sh: unknown mode '$MODE': use --test, --lock or nothing" >&2; exit 2 ;;
esac
