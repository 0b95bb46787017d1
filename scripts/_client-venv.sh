# The body of scripts/harness-venv.sh and scripts/smolagents-venv.sh (venvs of agent SDKs that
# the tests run as separate client processes), sourced by them with their arguments, after
# they set:
#   NAME         the venv's name (messages, the stamp's name, the script to name in the lock)
#   VENV, LOCK   the venv's folder and its lock
#   WANTS        (array) what --lock resolves (uv among them: it installs the lock)
# Modes: nothing (build, or reuse, and print its python), --lock (resolve LOCK again with uv,
# then build). The venv holds the lock only, not ors_gym. The venv keeps a stamp holding the
# SHA-256 of the lock; when it matches, nothing is installed. uv, pinned by the lock, is
# bootstrapped with pip and installs exactly the lock (uv pip sync).
STAMP="$VENV/.ors-gym-$NAME.sha256"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
if [ "${1:-}" = --lock ]; then
  "$PY" -m uv --version >/dev/null 2>&1 || "$PY" -m pip install -q uv
  wants="$(mktemp)"
  trap 'rm -f "$wants"' EXIT
  printf '%s\n' "${WANTS[@]}" > "$wants"
  "$PY" -m uv pip compile "$wants" --python-version 3.11 --no-annotate --quiet \
    --custom-compile-command "scripts/$NAME-venv.sh --lock" -o "$LOCK"
elif [ $# -gt 0 ]; then
  echo "$NAME-venv.sh: unknown mode '$1': use --lock or nothing" >&2
  exit 2
fi

wanted="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
  echo "$NAME-venv: $VENV is up to date with $LOCK" >&2
else
  uv_pin="$(grep -E '^uv==' "$LOCK")"
  [ "$("$PY" -m uv --version 2>/dev/null | cut -d' ' -f2)" = "${uv_pin#uv==}" ] \
    || "$PY" -m pip install -q "$uv_pin"
  "$PY" -m uv pip sync -q --python "$PY" "$LOCK"
  echo "$wanted" > "$STAMP"
  echo "$NAME-venv: installed $LOCK into $VENV" >&2
fi
echo "$PY"
