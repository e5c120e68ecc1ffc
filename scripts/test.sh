#!/usr/bin/env bash
# Build everything and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --test
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
cd build && ctest --output-on-failure -j2
