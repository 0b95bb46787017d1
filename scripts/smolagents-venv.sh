#!/usr/bin/env bash
# The smolagents venv: smolagents' MCP adapter (mcpadapt) is written against mcp 1.x, and the
# harness venv (scripts/harness-venv.sh) holds mcp 2.x for openai-agents, so smolagents gets a
# venv of its own. It holds the lock only, not ors_gym: the harness tests run a preset's script
# with its python as the harness command line.
#   bash scripts/smolagents-venv.sh          build or update it (default folder .smolagents-venv,
#                                            or $ORS_GYM_SMOLAGENTS_VENV) from
#                                            requirements/smolagents.lock, and print its python
#   bash scripts/smolagents-venv.sh --lock   resolve requirements/smolagents.lock again with uv
# The body is scripts/_client-venv.sh (the stamp, --lock, uv pip sync).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/smolagents.lock
VENV="${ORS_GYM_SMOLAGENTS_VENV:-.smolagents-venv}"
WANTS=('smolagents[mcp,openai]' 'mcp<2' 'uv')
NAME=smolagents
. scripts/_client-venv.sh "$@"
