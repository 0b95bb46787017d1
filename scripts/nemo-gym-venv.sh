#!/usr/bin/env bash
# Build (once) the venv that runs the NeMo Gym bridge's tests. nemo-gym 0.7.0 declares Python
# >= 3.13.14, but its resources-server code runs on 3.11: it is installed with pip's
# --ignore-requires-python and --no-deps, beside its runtime dependencies and ors-gym's `local`
# extra, all from requirements/nemo-gym.lock (mlflow, needed only by NeMo Gym's collection
# command, is left out: its exporter needs Python 3.12).
#   bash scripts/nemo-gym-venv.sh                 build it, or reuse it, and print its python
#   bash scripts/nemo-gym-venv.sh --test [ARGS]   the same, then run tests/nemo_gym in it
#   bash scripts/nemo-gym-venv.sh --lock          resolve requirements/nemo-gym.lock again, then build
# ORS_GYM_NEMO_GYM_VENV chooses its folder (default: ~/.cache/ors-gym/nemo-gym-venv). The venv
# holds the lock only, not ors_gym, which the tests import from this checkout; it is built again
# only when the lock changes (a stamp holds its SHA-256).
set -euo pipefail
cd "$(dirname "$0")/.."
NEMO_GYM="nemo-gym==0.7.0"
VENV="${ORS_GYM_NEMO_GYM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ors-gym/nemo-gym-venv}"
LOCK=requirements/nemo-gym.lock
STAMP="$VENV/.ors-gym-nemo-gym.sha256"
# nemo-gym's own requirements that its resources servers, its simple agent and its testing
# helpers import (mlflow, datasets and the sandbox extras are not among them).
WANTS=('fastapi' 'pydantic' 'pydantic-core' 'orjson>=3.11.6' 'requests' 'uvicorn' 'aiohttp>=3.14.4'
       'anyio>=4.15.1' 'omegaconf' 'hydra-core' 'itsdangerous' 'openai==2.44.0' 'mcp>=1.28.1,<2'
       'httptools' 'uvloop' 'psutil' 'devtools' 'rich' 'tqdm' 'ray[default]>=2.58.0'
       'yappi>=1.7.6' 'jinja2>=3.1' 'anthropic<=0.109.2' 'pydot' 'pandas' 'scipy>=1.14.1'
       'wandb>=0.30.0' 'packaging>=24.2' 'pytest-asyncio'
       "ors-gym[local,nemo-gym] @ file://$(pwd -P)" 'pytest>=8' 'pytest-timeout>=2.3')
MODE="${1:-build}"
[ $# -gt 0 ] && shift

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m uv --version >/dev/null 2>&1 || "$PY" -m pip install --quiet uv

if [ "$MODE" = --lock ]; then
  wants="$(mktemp)"
  trap 'rm -f "$wants"' EXIT
  printf '%s\n' "${WANTS[@]}" > "$wants"
  "$PY" -m uv pip compile "$wants" --python-version 3.11 --no-emit-package ors-gym \
    --no-annotate --no-header --quiet -o "$LOCK"
  # nemo-gym itself last: installed by pip without its Python floor or its dependencies.
  echo "$NEMO_GYM" >> "$LOCK"
  MODE=build
fi

wanted="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
  echo "nemo-gym-venv: $VENV is up to date with $LOCK" >&2
else
  deps="$(mktemp)"
  grep -v '^nemo-gym==' "$LOCK" > "$deps"
  "$PY" -m uv pip install --quiet --python "$PY" -r "$deps"
  rm -f "$deps"
  "$PY" -m pip install --quiet --no-deps --ignore-requires-python "$(grep '^nemo-gym==' "$LOCK")"
  echo "$wanted" > "$STAMP"
  echo "nemo-gym-venv: installed $LOCK into $VENV" >&2
fi

case "$MODE" in
  build) echo "$PY" ;;
  --test)
    export OPENREWARD_DISABLE_UPDATE_CHECK=1
    export PYTHONPATH="$(pwd -P)${PYTHONPATH:+:$PYTHONPATH}"
    exec "$PY" -m pytest -q -p no:cacheprovider -o asyncio_default_fixture_loop_scope=function \
      tests/nemo_gym "$@" ;;
  *) echo "nemo-gym-venv.sh: unknown mode '$MODE': use --test, --lock or nothing" >&2; exit 2 ;;
esac
