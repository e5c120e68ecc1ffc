#!/usr/bin/env bash
# Build everything and run the whole test suite (what CI runs).
#   scripts/test.sh             release build in build/, every test (also on emulated CPUs)
#   scripts/test.sh --sanitize  ASan + UBSan build in build-sanitize/, the unit and CLI tests;
#                               any finding fails the run
#   scripts/test.sh --fuzz SECONDS
#                               clang libFuzzer build in build-fuzz/, each fuzz target (fuzz/) run
#                               SECONDS seconds on a copy of its corpus; any crash, leak, timeout,
#                               out-of-memory or sanitizer finding fails the run (fuzz/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--fuzz" ]; then
  secs="${2:-}"
  if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then echo "usage: scripts/test.sh --fuzz SECONDS" >&2; exit 2; fi
  scripts/install_deps.sh --fuzz
  # The library instrumented, the fuzz targets, no CLI and no tests (-O1 -g: CMakeLists.txt).
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Fuzz -DLOOPLM_FUZZ=ON -DLOOPLM_TESTS=OFF \
    -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  cmake --build build-fuzz -j2
  # Each target fuzzes build-fuzz/corpus/<target>: the seeds of fuzz/corpus/<target> copied in
  # (new inputs are written there, never into the repository), with fuzz/<target>.dict when there
  # is one. Findings go to build-fuzz/artifacts/<target>/, the log to build-fuzz/fuzz_<target>.log.
  # -timeout: an input running 10 s is a finding (a hang); -rss_limit_mb also bounds one malloc.
  # Leaks are detected (LeakSanitizer after each input that allocated more than it freed, and at
  # exit): the fuzz build runs the library serially and these parsers start neither an OpenMP pool
  # nor oneDNN, so nothing stays allocated by design. ASan's quarantine of freed memory is cut to
  # 32 MB (from 256): the targets allocate per input, and recycling 256 MB kept faulting in fresh
  # pages (fuzz_data ran ~1.3-2x faster); a use after free within one input is still caught.
  # The files the targets write for path-taking loaders go to a tmpfs (/dev/shm) when there is one,
  # 2x the runs of fuzz_data on disk. The targets run two at a time (one per core on CI).
  declare -A max_len=([safetensors]=65536 [checkpoint]=65536 [config]=16384 [data]=16384 [prompts]=16384 [gguf]=65536 [tokenizer]=16384 [chat_template]=16384 [serve_request]=16384)
  targets=(safetensors checkpoint config data prompts gguf tokenizer chat_template serve_request)
  scratch=$(mktemp -d /dev/shm/looplm-fuzz.XXXXXX 2>/dev/null || mktemp -d "$PWD/build-fuzz/tmp.XXXXXX")
  trap 'rm -rf "$scratch"' EXIT
  run_target() {
    local t=$1 work=build-fuzz/corpus/$1 art=build-fuzz/artifacts/$1/ dict=()
    rm -rf "$art" && mkdir -p "$work" "$art"
    cp fuzz/corpus/"$t"/* "$work"/
    [ -f fuzz/"$t".dict ] && dict=(-dict=fuzz/"$t".dict)
    TMPDIR="$scratch" ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=32 UBSAN_OPTIONS=print_stacktrace=1 \
      build-fuzz/fuzz/fuzz_"$t" "$work" "${dict[@]}" -max_total_time="$secs" -timeout=10 \
      -rss_limit_mb=2048 -max_len="${max_len[$t]}" -artifact_prefix="$art" -print_final_stats=1 \
      >build-fuzz/fuzz_"$t".log 2>&1
  }
  declare -A pid
  for t in "${targets[@]}"; do
    if [ "$(jobs -rp | wc -l)" -ge 2 ]; then wait -n || true; fi
    run_target "$t" &
    pid[$t]=$!
  done
  failed=()
  for t in "${targets[@]}"; do
    rc=0
    wait "${pid[$t]}" || rc=$?
    log=build-fuzz/fuzz_$t.log
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    corpus=$(find build-fuzz/corpus/"$t" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
      result=ok
    else
      failed+=("$t")
      what=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [^(]*|runtime error: .*|terminate called .*' "$log" || true)
      result="FAILED (exit $rc: ${what:-see the log}; input in build-fuzz/artifacts/$t/, log $log)"
    fi
    printf 'fuzz_%-12s %9s runs in %ss, corpus %s inputs: %s\n' "$t" "${runs:-?}" "$secs" "$corpus" "$result"
  done
  for t in "${failed[@]}"; do
    echo "---- fuzz_$t: the end of build-fuzz/fuzz_$t.log"
    tail -60 build-fuzz/fuzz_"$t".log
  done
  [ ${#failed[@]} -eq 0 ] || exit 1
  exit 0
fi
scripts/install_deps.sh --test
if [ "${1:-}" = "--sanitize" ]; then
  # -O1: fast enough to run the suite; UBSan findings abort (no recovery), ASan's do anyway.
  flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
  # The Python module too: its tests run in Debian's uninstrumented python3 with the ASan runtime
  # preloaded (CMakeLists.txt, python_module / python_signals). No liblooplm.so (so no install
  # test): an instrumented shared library needs instrumented consumers, and what the install test
  # checks (files, SONAME, the packages) is the release build's.
  cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DLOOPLM_PYTHON=ON -DLOOPLM_SHARED=OFF >/dev/null
  cmake --build build-sanitize -j2
  # detect_leaks=0: OpenMP and oneDNN keep thread pools and JIT buffers alive at exit by design.
  # mpi_train: 2-rank jobs beside the other test on 2 cores, several times slower instrumented;
  # the reduction order it checks runs here in-process (GradientSum.*, docs/testing.md).
  cd build-sanitize && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j2 -E '^(emulated_cpu_|experiments_|corpus_small|mpi_train|docs_examples)'
  exit
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
cd build && ctest --output-on-failure -j2
