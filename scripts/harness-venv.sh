#!/usr/bin/env bash
# The harness venv: the agent SDKs that tests/gateway points at the capture gateway as clients
# (the OpenAI Agents SDK, pydantic-ai) pin versions the suite's venv cannot hold (openai-agents
# needs mcp 2.x), so they live in a venv of their own (smolagents, whose MCP adapter needs mcp
# 1.x, has one more: scripts/smolagents-venv.sh). It holds the lock only, not
# ors_gym: the tests, in the main venv, run small client scripts with its python as subprocesses.
#   bash scripts/harness-venv.sh          build or update it (default folder .harness-venv, or
#                                         $ORS_GYM_HARNESS_VENV) from requirements/harness.lock,
#                                         and print its python
#   bash scripts/harness-venv.sh --lock   resolve requirements/harness.lock again with uv, then build
# The venv keeps a stamp holding the SHA-256 of the lock; when it matches, nothing is installed.
# uv, pinned by the lock, is bootstrapped with pip and installs exactly the lock (uv pip sync).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/harness.lock
VENV="${ORS_GYM_HARNESS_VENV:-.harness-venv}"
STAMP="$VENV/.ors-gym-harness.sha256"
WANTS=('openai-agents' 'pydantic-ai-slim[openai,mcp]' 'uv')

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
if [ "${1:-}" = --lock ]; then
  "$PY" -m uv --version >/dev/null 2>&1 || "$PY" -m pip install -q uv
  wants="$(mktemp)"
  trap 'rm -f "$wants"' EXIT
  printf '%s\n' "${WANTS[@]}" > "$wants"
  "$PY" -m uv pip compile "$wants" --python-version 3.11 --no-annotate --quiet \
    --custom-compile-command "scripts/harness-venv.sh --lock" -o "$LOCK"
elif [ $# -gt 0 ]; then
  echo "harness-venv.sh: unknown mode '$1': use --lock or nothing" >&2
  exit 2
fi

wanted="$(sha256sum "$LOCK" | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
  echo "harness-venv: $VENV is up to date with $LOCK" >&2
else
  uv_pin="$(grep -E '^uv==' "$LOCK")"
  [ "$("$PY" -m uv --version 2>/dev/null | cut -d' ' -f2)" = "${uv_pin#uv==}" ] \
    || "$PY" -m pip install -q "$uv_pin"
  "$PY" -m uv pip sync -q --python "$PY" "$LOCK"
  echo "$wanted" > "$STAMP"
  echo "harness-venv: installed $LOCK into $VENV" >&2
fi
echo "$PY"
