# The body of scripts/verl-venv.sh and scripts/tinker-venv.sh, sourced by them with their
# arguments, after they set:
#   NAME         the bridge (verl, tinker): messages, the stamp's name
#   VENV, LOCK   the venv's folder and its lock
#   WANTS        (array) what --lock resolves: the bridge's libraries, ors-gym's extras for it
#                (file:// this checkout), trl for the tests' tokenizer, the test tools
#   TESTS        (array) pytest's options and test folder for --test
# Modes: nothing (build, or reuse, and print its python), --test [ARGS], --lock (resolve LOCK
# again against the CPU torch kept on disk, then build). The venv holds the lock only, not
# ors_gym, which the tests import from this checkout; it is built again only when the lock
# changes (a stamp holds its SHA-256). torch is installed first with pip (the CPU build kept on
# disk) and held by a constraint, as scripts/setup.sh does.
TORCH="torch==2.13.0"
STAMP="$VENV/.ors-gym-$NAME.sha256"
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
  wants="$(mktemp)"
  printf '%s\n' "${WANTS[@]}" > "$wants"
  "$PY" -m uv pip compile "$wants" --constraint "$constraint" --find-links /opt/wheels \
    --python-version 3.11 --no-emit-package ors-gym --no-annotate --no-header --quiet \
    -o "$LOCK"
  rm -f "$wants"
  MODE=build
fi

wanted="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
  echo "$NAME-venv: $VENV is up to date with $LOCK" >&2
else
  "$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install --quiet "$TORCH"
  "$PY" -m uv pip install --quiet --python "$PY" --constraint "$constraint" \
    --find-links /opt/wheels -r "$LOCK"
  echo "$wanted" > "$STAMP"
  echo "$NAME-venv: installed $LOCK into $VENV" >&2
fi

case "$MODE" in
  build) echo "$PY" ;;
  --test)
    export OPENREWARD_DISABLE_UPDATE_CHECK=1
    export PYTHONPATH="$(pwd -P)${PYTHONPATH:+:$PYTHONPATH}"
    exec "$PY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" "$@" ;;
  *) echo "$NAME-venv.sh: unknown mode '$MODE': use --test, --lock or nothing" >&2; exit 2 ;;
esac
