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
# The body is scripts/_client-venv.sh (the stamp, --lock, uv pip sync).
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=requirements/harness.lock
VENV="${ORS_GYM_HARNESS_VENV:-.harness-venv}"
WANTS=('openai-agents' 'pydantic-ai-slim[openai,mcp]' 'uv')
NAME=harness
. scripts/_client-venv.sh "$@"
