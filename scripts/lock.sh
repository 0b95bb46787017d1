#!/usr/bin/env bash
# Refresh the locks under requirements/, then commit them:
#   dev.lock        the exact version of every package the "dev" extra (the whole suite, the docs
#                   tools included, and so the "train" extra too) resolves to, for every platform
#                   and Python >= 3.11 (uv's universal resolution), with torch held at the version
#                   setup.sh pins; scripts/setup.sh installs with it as a constraint;
#   verifiers.lock  the verifiers bridge's own venv (scripts/verifiers-venv.sh --lock);
#   verl.lock       the veRL bridge's own venv (scripts/verl-venv.sh --lock, which also rebuilds
#                   that venv when its lock changed);
#   tinker.lock     the Tinker bridge's own venv (scripts/tinker-venv.sh --lock, the same way);
#   nemo-gym.lock, harness.lock, smolagents.lock   the NeMo Gym bridge's and the agent SDKs'
#                   venvs (scripts/nemo-gym-venv.sh, harness-venv.sh, smolagents-venv.sh --lock).
# A fresh clone so gets what the suite was last run with; pyproject.toml keeps the library's own
# ranges open. Run it after changing pyproject.toml's dependencies or extras, and to move to
# newer releases.
# It uses the venv's uv when there is one (scripts/setup.sh installs it), else uv on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ORS_GYM_VENV:-.venv}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m uv --version >/dev/null 2>&1; then
  uv=("$VENV/bin/python" -m uv)
elif command -v uv >/dev/null 2>&1; then
  uv=(uv)
else
  echo "lock.sh: uv is missing: run 'bash scripts/setup.sh test' first, or 'pip install uv'" >&2
  exit 1
fi
TORCH="$(sed -n 's/.*"\(torch==[0-9.]*\)".*/\1/p' scripts/setup.sh | head -n 1)"
held="$(mktemp)"
trap 'rm -f "$held"' EXIT
echo "$TORCH" > "$held"
# --universal: one file for Linux, macOS and Windows and every Python the package allows.
"${uv[@]}" pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
  --constraint "$held" --no-header --quiet --output-file requirements/dev.lock.new
{
  echo "# The versions scripts/setup.sh installs (as constraints); generated, do not edit."
  echo "# Refresh: bash scripts/lock.sh   (uv pip compile of pyproject.toml's dev extra, $TORCH)"
  # The held torch's constraint file is a temporary one: name what it is instead of its path.
  sed "s#-c $held#-c torch held by scripts/lock.sh#" requirements/dev.lock.new
} > requirements/dev.lock
rm -f requirements/dev.lock.new
echo "lock.sh: requirements/dev.lock: $(grep -c '==' requirements/dev.lock) pinned packages ($TORCH)"
bash scripts/verifiers-venv.sh --lock >/dev/null
bash scripts/verl-venv.sh --lock >/dev/null
bash scripts/tinker-venv.sh --lock >/dev/null
bash scripts/nemo-gym-venv.sh --lock >/dev/null
bash scripts/harness-venv.sh --lock >/dev/null
bash scripts/smolagents-venv.sh --lock >/dev/null
echo "lock.sh: requirements/verifiers.lock, verl.lock, tinker.lock, nemo-gym.lock, harness.lock and smolagents.lock refreshed"
