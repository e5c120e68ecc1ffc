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
echo
echo "The model is in runs/looped (model.safetensors, its config and metrics). Next:"
echo "  build/looplm generate --checkpoint runs/looped -p \"And God said\" --temperature 0.8 -n 200"
echo "  build/looplm eval --checkpoint runs/looped --exit-rule kl --exit-threshold 0.01 --kv-policy last"
echo "  build/looplm serve --checkpoint runs/looped      # then open http://127.0.0.1:8080/"
