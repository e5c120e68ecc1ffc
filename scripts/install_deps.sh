#!/usr/bin/env bash
# Debian 12 packages looplm needs to build, test and run its default job. Idempotent.
set -euo pipefail
PKGS=(g++ cmake make libdnnl-dev nlohmann-json3-dev libcli11-dev libgtest-dev bible-kjv)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
