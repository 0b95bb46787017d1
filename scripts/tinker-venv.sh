#!/usr/bin/env bash
# Build (once) the venv that runs the Tinker bridge's tests. tinker-cookbook 0.5.8 caps
# transformers at 5.5.4, below the suite's venv (and 0.6.1 needs a tml-renderers release that
# PyPI does not have), so tests/tinker runs in a venv of its own, installed from
# requirements/tinker.lock:
#   bash scripts/tinker-venv.sh                 build it, or reuse it, and print its python
#   bash scripts/tinker-venv.sh --test [ARGS]   the same, then run tests/tinker in it (pytest ARGS)
#   bash scripts/tinker-venv.sh --lock          resolve requirements/tinker.lock again, then build
# The venv holds the lock only (tinker-cookbook, the local and tinker extras' libraries, trl for
# the tests' tokenizer, pytest), not ors_gym, which the tests import from this checkout: one venv
# serves every checkout, and it is built again only when the lock changes (a stamp holds its
# SHA-256). ORS_GYM_TINKER_VENV chooses its folder (default: ~/.cache/ors-gym/tinker-venv). torch
# is installed first with pip (the CPU build kept on disk) and held by a constraint, as
# scripts/setup.sh does. The tests never reach the Tinker service: a local model samples.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ORS_GYM_TINKER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ors-gym/tinker-venv}"
LOCK=requirements/tinker.lock
TORCH="torch==2.13.0"
STAMP="$VENV/.ors-gym-tinker.sha256"
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
  # ors_gym's extras for the bridge (local: in-process environments; tinker: tinker-cookbook),
  # trl (the tests' tokenizer takes its chat template) and the test tools, resolved against the
  # CPU torch kept on disk.
  wants="$(mktemp)"
  printf '%s\n' "ors-gym[local,tinker] @ file://$(pwd -P)" 'trl>=1.16' 'pytest>=8' \
    'pytest-timeout>=2.3' > "$wants"
  "$PY" -m uv pip compile "$wants" --constraint "$constraint" --find-links /opt/wheels \
    --python-version 3.11 --no-emit-package ors-gym --no-annotate --no-header --quiet \
    -o "$LOCK"
  rm -f "$wants"
  MODE=build
fi

wanted="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
  echo "tinker-venv: $VENV is up to date with $LOCK" >&2
else
  "$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install --quiet "$TORCH"
  "$PY" -m uv pip install --quiet --python "$PY" --constraint "$constraint" \
    --find-links /opt/wheels -r "$LOCK"
  echo "$wanted" > "$STAMP"
  echo "tinker-venv: installed $LOCK into $VENV" >&2
fi

case "$MODE" in
  build) echo "$PY" ;;
  --test)
    export OPENREWARD_DISABLE_UPDATE_CHECK=1
    export PYTHONPATH="$(pwd -P)${PYTHONPATH:+:$PYTHONPATH}"
    exec "$PY" -m pytest -q -p no:cacheprovider tests/tinker "$@" ;;
  *) echo "tinker-venv.sh: unknown mode '$MODE': use --test, --lock or nothing" >&2; exit 2 ;;
esac
