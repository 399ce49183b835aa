#!/usr/bin/env bash
# Installs the Debian packages lazytpu needs, and nothing when all are present.
# Usage: scripts/bootstrap.sh   (root, or sudo available)
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  libcmocka-dev
  libopenblas-dev
  libomp-dev
  libtorch-dev python3-torch python3-torchvision
  python3-dev python3-pytest python3-numpy python3-matplotlib
  dataset-fashion-mnist
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
