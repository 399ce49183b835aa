#!/usr/bin/env bash
# Sets up everything lazytpu needs on a fresh Debian 12/13 machine, and does
# nothing when it is all there:
#   1. Debian packages: build tools, OpenBLAS, cmocka, Open MPI, clang (fuzzing),
#      the Fashion-MNIST data set;
#   2. the project's virtual environment .venv (Python 3.11) with torch==2.13.0
#      (the CPU wheel pip finds on the project's machines) and the test tools;
#   3. lazytpu itself, installed into .venv in editable mode (entry points:
#      PyTorch's backend autoloading, the lazytpu-run launcher).
# Usage: scripts/bootstrap.sh   (root, or sudo available). Prints what it does.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  build-essential cmake pkg-config
  libcmocka-dev
  libopenblas-dev
  libopenmpi-dev openmpi-bin
  clang libclang-rt-dev libomp-dev
  python3-dev
  dataset-fashion-mnist
)
PY_REQS=(torch==2.13.0 numpy pytest hypothesis expecttest matplotlib wheel "setuptools>=64")
# The frameworks lazytpu integrates with (lazytpu.lightning, lazytpu.keras,
# lazytpu.hf).
# Their metadata admits torch 2.13 (lightning 2.6.6: torch>=2.1,<4.0; keras
# has no torch requirement), and they are installed in a second step with
# torch==2.13.0 on the same command line, so the resolver can never replace
# torch; the check below fails the bootstrap if it did anyway.
# Hugging Face (lazytpu.hf, the torch_xla paths of Trainer and Accelerate):
# transformers 5.24 needs torch>=2.4, accelerate 1.15 torch>=2.0; datasets has
# no torch requirement. Same second step, same torch==2.13.0 on the line.
FRAMEWORK_REQS=(lightning==2.6.6 keras==3.15.1 transformers==5.24.0 accelerate==1.15.0
                datasets==5.2.0)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

missing_pkgs() {
  local p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      echo "$p"
    fi
  done
}

apt_install() {
  echo "bootstrap: installing Debian packages: $*"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "$@"
}

mapfile -t missing < <(missing_pkgs "${PKGS[@]}")
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi

# ---- Python 3.11 for the venv: the machine's python3.11 if it can make a
# venv with pip, else Debian's (Debian 12 ships 3.11; python3.11-venv).
find_python() {
  local c
  for c in "${LAZYTPU_PYTHON:-}" python3.11 /usr/bin/python3.11 python3; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || continue
    if "$c" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' \
        2>/dev/null; then
      command -v "$c"
      return 0
    fi
  done
  return 1
}

VENV=.venv
STAMP=$VENV/.lazytpu-bootstrap
WANT="reqs: ${PY_REQS[*]}; frameworks: ${FRAMEWORK_REQS[*]}"
if [ ! -x $VENV/bin/python ] || [ "$(cat $STAMP 2>/dev/null)" != "$WANT" ]; then
  PY=$(find_python || true)
  if [ -z "$PY" ] && [ -x /usr/bin/python3.11 ]; then
    apt_install python3.11-venv
    PY=$(find_python || true)
  fi
  if [ -z "$PY" ]; then
    echo "bootstrap: no Python 3.11 with venv found (torch 2.13's wheel here is for 3.11)." >&2
    echo "bootstrap: install python3.11 and python3.11-venv, or set LAZYTPU_PYTHON." >&2
    exit 1
  fi
  if [ ! -x $VENV/bin/python ]; then
    echo "bootstrap: creating $VENV with $PY"
    "$PY" -m venv $VENV
  fi
  echo "bootstrap: installing into $VENV: ${PY_REQS[*]}"
  $VENV/bin/python -m pip install -q --disable-pip-version-check "${PY_REQS[@]}" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
  echo "bootstrap: installing into $VENV: ${FRAMEWORK_REQS[*]} (torch stays 2.13.0)"
  $VENV/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0 \
    "${FRAMEWORK_REQS[@]}" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  $VENV/bin/python -c 'import torch, sys; v = torch.__version__.split("+")[0]; \
sys.exit(0 if v == "2.13.0" else "bootstrap: torch " + v + " in .venv, expected 2.13.0")'
  echo "$WANT" > $STAMP
fi
