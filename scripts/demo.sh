#!/usr/bin/env bash
# The main job: install, build, prepare the KJV corpus, train the `looped` preset, print the
# early-exit table and a sample. Extra arguments go to `looplm train` (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target looplm
scripts/prepare_kjv.sh data/kjv
# --resume: a first run starts fresh, an interrupted one continues, a finished one prints its report
# again (nothing is deleted; --overwrite starts over).
build/looplm train --preset looped --out runs/looped --resume "$@"
