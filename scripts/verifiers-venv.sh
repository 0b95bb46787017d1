#!/usr/bin/env bash
# The verifiers venv: verifiers (PrimeIntellect) cannot share a venv with the openreward SDK that
# the suite's venv holds, so its bridge (ors_gym.verifiers) is tested from a venv of its own.
#   scripts/verifiers-venv.sh          build or update it (default folder .verifiers-venv, or
#                                      $ORS_GYM_VERIFIERS_VENV): exactly requirements/verifiers.lock,
#                                      then this checkout's ors_gym, editable, without dependencies.
#   scripts/verifiers-venv.sh --lock   remake requirements/verifiers.lock from pyproject.toml's
#                                      `verifiers` extra and requirements/verifiers.in (uv included).
# The venv keeps a stamp holding the SHA-256 of the lock; when it matches and ors_gym_verifiers
# is installed from this checkout, nothing runs (a fraction of a second). Installing is done by uv,
# itself pinned by the lock and bootstrapped with pip.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/verifiers.lock
VENV="${ORS_GYM_VERIFIERS_VENV:-.verifiers-venv}"
STAMP="$VENV/.ors-gym-verifiers.sha256"

if [ "${1:-}" = --lock ]; then
  if command -v uv >/dev/null 2>&1; then uvx=(uv); else uvx=("$VENV/bin/python" -m uv); fi
  "${uvx[@]}" pip compile pyproject.toml requirements/verifiers.in --extra verifiers \
    --python-version 3.11 --custom-compile-command "scripts/verifiers-venv.sh --lock" -o "$LOCK"
  exit 0
fi

wanted="$(sha256sum "$LOCK" | cut -d' ' -f1)"
here="$(pwd -P)"
current() {
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] && (cd / && "$here/$VENV/bin/python" -c '
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("ors_gym_verifiers")  # found, not imported: verifiers is slow to load
sys.exit(spec is None or pathlib.Path(spec.origin).resolve().parents[1] != pathlib.Path(sys.argv[1]))
' "$here") 2>/dev/null
}
if current; then
  echo "verifiers-venv: $VENV is up to date with $LOCK"
  exit 0
fi
echo "verifiers-venv: installing $LOCK into $VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
uv_pin="$(grep -E '^uv==' "$LOCK")"
"$VENV/bin/python" -m uv --version >/dev/null 2>&1 || "$VENV/bin/python" -m pip install -q "$uv_pin"
"$VENV/bin/python" -m uv pip sync -q --python "$VENV/bin/python" "$LOCK"
"$VENV/bin/python" -m uv pip install -q --python "$VENV/bin/python" --no-deps -e .
echo "$wanted" > "$STAMP"
echo "verifiers-venv: $VENV is ready"
