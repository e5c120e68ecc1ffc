#!/usr/bin/env bash
# Build everything and run the whole test suite (what CI runs).
#   scripts/test.sh             release build in build/, every test (also on emulated CPUs)
#   scripts/test.sh --sanitize  ASan + UBSan build in build-sanitize/, the unit and CLI tests;
#                               any finding fails the run
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --test
if [ "${1:-}" = "--sanitize" ]; then
  # -O1: fast enough to run the suite; UBSan findings abort (no recovery), ASan's do anyway.
  flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
  cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build build-sanitize -j2
  # detect_leaks=0: OpenMP and oneDNN keep thread pools and JIT buffers alive at exit by design.
  cd build-sanitize && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j2 -E '^(emulated_cpu_|experiments_quick)'
  exit
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
cd build && ctest --output-on-failure -j2
