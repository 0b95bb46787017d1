#!/usr/bin/env bash
# Create the venv (once) and install ors_gym with the extra one job needs:
#   setup.sh train   the main job: ".[train]" (in-process environments and Stable-Baselines3);
#                    no Ray, linters or test tools, and no system package.
#   setup.sh test    (the default) the whole suite: ".[dev]" (every extra and the tools),
#                    Debian's chromium for the viewer's browser test (apt-get, only as root),
#                    and the bridges' venvs of their own, each from its lock, built beside
#                    the main install: scripts/verifiers-venv.sh (verifiers cannot share a venv
#                    with the SDK), scripts/verl-venv.sh (verl pins older transformers) and
#                    scripts/tinker-venv.sh (tinker-cookbook caps transformers too),
#                    scripts/nemo-gym-venv.sh (nemo-gym declares Python >= 3.13.14), the
#                    agent SDKs the gateway's tests run as clients, scripts/harness-venv.sh,
#                    and smolagents (its MCP adapter needs mcp 1.x), scripts/smolagents-venv.sh.
# torch is installed first with pip, pinned to the CPU build this workplace keeps on disk; the
# package metadata does not pin it. The rest is installed by uv (from PyPI, into the venv), held
# to the torch already there so that no other build of torch is ever fetched; set
# ORS_GYM_INSTALLER=pip to install with pip instead. Both install with requirements/dev.lock as a
# constraint: every package gets the version the lock names (the versions the suite was run
# with), and nothing the extra does not ask for is installed; `bash scripts/lock.sh` refreshes
# the lock. chromium's apt-get (without its recommends) runs beside the Python install. The
# install runs only when something it installs has changed: the venv keeps a stamp holding the
# SHA-256 of pyproject.toml and requirements/dev.lock and the extra installed, and the install runs
# again when the hash differs, when the extra installed is not enough (dev covers train), or
# when ors_gym (from this checkout) is not importable. ORS_GYM_VENV chooses the venv folder
# (default .venv); a fresh folder always installs.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-test}"
case "$MODE" in
  train) EXTRA=train ;;
  test) EXTRA=dev ;;
  *) echo "setup.sh: unknown job '$MODE': use 'train' (the main job) or 'test'" >&2; exit 2 ;;
esac
VENV="${ORS_GYM_VENV:-.venv}"
STAMP="$VENV/.ors-gym-setup.sha256"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"

chromium_job=""
bridges_job=""
if [ "$MODE" = test ]; then
  echo "setup: building the verifiers, veRL, Tinker, NeMo Gym and harness venvs from their locks, beside the Python install"
  ( bash scripts/verifiers-venv.sh && bash scripts/verl-venv.sh >/dev/null \
    && bash scripts/tinker-venv.sh >/dev/null && bash scripts/nemo-gym-venv.sh >/dev/null \
    && bash scripts/harness-venv.sh >/dev/null && bash scripts/smolagents-venv.sh >/dev/null ) &
  bridges_job=$!
fi
have_chromium() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }
if [ "$MODE" = test ] && ! have_chromium; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium (the viewer's browser test), beside the Python install"
    ( apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends chromium ) \
      >/dev/null &
    chromium_job=$!
  else
    echo "setup: chromium is missing (sudo apt-get install -y chromium); the browser test will skip"
  fi
fi

python -c "import torch" 2>/dev/null || python -m pip install --quiet "torch==2.13.0"

LOCK=requirements/dev.lock
wanted="$(python -c 'import hashlib, sys
print(hashlib.sha256(b"".join(open(p, "rb").read() for p in sys.argv[1:])).hexdigest())' \
  pyproject.toml "$LOCK")"
# The stamp is "<sha256> <extra>"; a stamp without an extra was written for dev.
[ -f "$STAMP" ] && read -r stamped_hash stamped_extra < "$STAMP" || true
stamped_hash="${stamped_hash:-}"
stamped_extra="${stamped_extra:-dev}"
enough() { [ "$stamped_extra" = "$EXTRA" ] || [ "$stamped_extra" = dev ]; }
# Imported from outside the checkout, so only an installed ors_gym counts, and only this one.
here="$(pwd -P)"
importable() {
  (cd / && python -c 'import pathlib, sys, ors_gym
sys.exit(pathlib.Path(ors_gym.__file__).resolve().parents[1] != pathlib.Path(sys.argv[1]))' "$here") \
    2>/dev/null
}
if [ "$wanted" = "$stamped_hash" ] && enough && importable; then
  echo "setup: $VENV is up to date with pyproject.toml and $LOCK ($stamped_extra); skipping pip install"
else
  if [ "${ORS_GYM_INSTALLER:-uv}" = pip ]; then
    python -m pip install --quiet --upgrade pip
    python -m pip install --quiet --constraint "$LOCK" -e ".[$EXTRA]"
  else
    python -m pip install --quiet uv
    # A constraint on the torch in the venv: a package asking for another torch fails the
    # resolution instead of fetching a multi-GB build.
    held="$VENV/.ors-gym-torch.txt"
    python -c 'from importlib.metadata import version; print("torch==" + version("torch").split("+")[0])' \
      > "$held"
    # --compile-bytecode: as pip does, so that no process compiles the libraries again.
    python -m uv pip install --quiet --compile-bytecode --python "$VENV/bin/python" \
      --constraint "$held" --constraint "$LOCK" -e ".[$EXTRA]"
  fi
  echo "$wanted $EXTRA" > "$STAMP"
fi

if [ -n "$bridges_job" ]; then
  wait "$bridges_job" || { echo "setup: building the verifiers, veRL, Tinker or NeMo Gym venv failed" >&2; exit 1; }
fi
if [ -n "$chromium_job" ]; then
  wait "$chromium_job" || echo "setup: apt-get could not install chromium; the browser test will skip"
fi
