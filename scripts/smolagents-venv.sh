#!/usr/bin/env bash
# The smolagents venv: smolagents' MCP adapter (mcpadapt) is written against mcp 1.x, and the
# harness venv (scripts/harness-venv.sh) holds mcp 2.x for openai-agents, so smolagents gets a
# venv of its own. It holds the lock only, not ors_gym: the harness tests run a preset's script
# with its python as the harness command line.
#   bash scripts/smolagents-venv.sh          build or update it (default folder .smolagents-venv,
#                                            or $ORS_GYM_SMOLAGENTS_VENV) from
#                                            requirements/smolagents.lock, and print its python
#   bash scripts/smolagents-venv.sh --lock   resolve requirements/smolagents.lock again with uv
# The venv keeps a stamp holding the SHA-256 of the lock; when it matches, nothing is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/smolagents.lock
VENV="${ORS_GYM_SMOLAGENTS_VENV:-.smolagents-venv}"
STAMP="$VENV/.ors-gym-smolagents.sha256"
WANTS=('smolagents[mcp,openai]' 'mcp<2' 'uv')

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
if [ "${1:-}" = --lock ]; then
  "$PY" -m uv --version >/dev/null 2>&1 || "$PY" -m pip install -q uv
  wants="$(mktemp)"
  trap 'rm -f "$wants"' EXIT
  printf '%s\n' "${WANTS[@]}" > "$wants"
  "$PY" -m uv pip compile "$wants" --python-version 3.11 --no-annotate --quiet \
    --custom-compile-command "scripts/smolagents-venv.sh --lock" -o "$LOCK"
elif [ $# -gt 0 ]; then
  echo "smolagents-venv.sh: unknown mode '$1': use --lock or nothing" >&2
  exit 2
fi

wanted="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
  echo "smolagents-venv: $VENV is up to date with $LOCK" >&2
else
  uv_pin="$(grep -E '^uv==' "$LOCK")"
  [ "$("$PY" -m uv --version 2>/dev/null | cut -d' ' -f2)" = "${uv_pin#uv==}" ] \
    || "$PY" -m pip install -q "$uv_pin"
  "$PY" -m uv pip sync -q --python "$PY" "$LOCK"
  echo "$wanted" > "$STAMP"
  echo "smolagents-venv: installed $LOCK into $VENV" >&2
fi
echo "$PY"
