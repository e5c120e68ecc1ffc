#!/usr/bin/env bash
# `cmake --install` into a temporary prefix (docs/library.md), then a program outside the tree
# (tests/consumer/greedy.cpp) built against what was installed, once by find_package(looplm) and
# once by pkg-config, nothing of the build tree in reach: each must print the installed CLI's
# greedy text for the same checkpoint and prompt. Also: the installed files, the SONAME, the
# package's version check, and a prefix that cannot be written (CMake's own error, non-zero).
# Usage: tests/install.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
libdir=$(dirname "$(find "$prefix" -name looplm.pc)")/..
libdir=$(cd "$libdir" && pwd)
for f in bin/looplm include/looplm/looplm.h include/looplm/config.h; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done
for f in liblooplm.so pkgconfig/looplm.pc cmake/looplm/looplmConfig.cmake cmake/looplm/looplmConfigVersion.cmake; do
  [ -e "$libdir/$f" ] || fail "lib/$f was not installed"
done
version=$("$prefix/bin/looplm" --version | sed -n 's/^looplm \([0-9.]*\).*/\1/p' | head -1)
[ -n "$version" ] || fail "looplm --version names no version"
soname=$(readelf -d "$libdir/liblooplm.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "liblooplm.so.${version%.*}" ] || fail "SONAME '$soname', expected liblooplm.so.${version%.*}"
echo "ok: installed $(du -sh "$prefix" | cut -f1) (version $version, SONAME $soname)"

# A model to decode: 60 steps of training by the installed CLI (a byte model that has learnt
# something of a small vocabulary, so its greedy text is not one repeated byte).
python3 -c "
import random, sys
r = random.Random(1)
w = 'in the beginning god created heaven and earth light darkness water firmament day night'.split()
open(sys.argv[1], 'w').write(' '.join(r.choice(w) for _ in range(4000)))" "$work/text.txt"
"$prefix/bin/looplm" train --preset looped --set d_model=32 --set n_heads=2 --set context=32 \
  --set batch_size=4 --set R=2 --set n_core=1 --set lr=0.01 --steps 60 --data "$work/text.txt" \
  --sample-len 0 --quiet -t 1 --out "$work/run" >/dev/null
prompt="the "
"$prefix/bin/looplm" generate --checkpoint "$work/run" -p "$prompt" -n 24 --temperature 0 -t 1 \
  >"$work/cli.txt" 2>/dev/null
expected=$(cat "$work/cli.txt")
[ "$expected" != "$prompt" ] || fail "the CLI generated nothing"

# Outside the tree: a copy of the consumer's sources, CMake searching only the prefix.
cp -r "$src/tests/consumer" "$work/consumer"
cmake -S "$work/consumer" -B "$work/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "find_package(looplm)"; }
cmake --build "$work/consumer/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "the consumer did not build with find_package"; }
got=$(OMP_NUM_THREADS=1 "$work/consumer/build/greedy" "$work/run" "$prompt" 24 2>"$work/greedy.log")
[ "$prompt$got" = "$expected" ] || fail "find_package build printed '$prompt$got', the CLI '$expected'"
echo "ok: find_package(looplm) consumer prints the CLI's greedy text: '$expected'"

# The same program by pkg-config (the library found at run time through LD_LIBRARY_PATH: the prefix
# is not one the dynamic linker searches).
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion looplm)" = "$version" ] || fail "pkg-config --modversion looplm: $(pkg-config --modversion looplm)"
# shellcheck disable=SC2046
g++ -std=c++20 -O1 "$work/consumer/greedy.cpp" -o "$work/greedy_pc" $(pkg-config --cflags --libs looplm) \
  >"$work/pc.log" 2>&1 || { cat "$work/pc.log"; fail "the consumer did not build with pkg-config"; }
got=$(LD_LIBRARY_PATH="$libdir" OMP_NUM_THREADS=1 "$work/greedy_pc" "$work/run" "$prompt" 24 2>"$work/greedy_pc.log")
[ "$prompt$got" = "$expected" ] || fail "pkg-config build printed '$prompt$got', the CLI '$expected'"
echo "ok: pkg-config consumer prints the CLI's greedy text"

# A version the package does not offer is refused by find_package's version check.
sed -i "s/find_package(looplm 0.3 REQUIRED)/find_package(looplm 9.0 REQUIRED)/" "$work/consumer/CMakeLists.txt"
if cmake -S "$work/consumer" -B "$work/consumer/build9" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake9.log" 2>&1; then
  fail "find_package(looplm 9.0) was accepted"
fi
grep -q "looplmConfigVersion.cmake\|version" "$work/cmake9.log" || { cat "$work/cmake9.log"; fail "the refusal names no version"; }
echo "ok: find_package(looplm 9.0) refused"

# A prefix that cannot be written: CMake's own error, non-zero (as root, a file stands where a
# directory must go, since root writes through permissions).
touch "$work/blocked"
if cmake --install "$build" --prefix "$work/blocked/p" >"$work/blocked.log" 2>&1; then fail "an install under a file succeeded"; fi
grep -qi "error" "$work/blocked.log" || { cat "$work/blocked.log"; fail "no error message for an unwritable prefix"; }
echo "ok: an unwritable prefix fails with CMake's error"
