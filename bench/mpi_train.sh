#!/usr/bin/env bash
# Data-parallel training speed on one machine (bench/README.md, "Data parallel"): the bench-dense
# preset, 2 ranks x 1 thread (mpirun) against 1 process x 2 threads, the same global batch
# (grad_accum 2 x batch 8 x 256 tokens), REPS interleaved runs; then the time the gradient sum
# across ranks takes per step at several bucket sizes. tokens/s and allreduce_s are the medians of
# each run's steps after the first two (metrics.jsonl), and the table shows the median run.
# Usage: bench/mpi_train.sh [LOOPLM_BINARY] [REPS] [STEPS]
set -euo pipefail
BIN=$(realpath "${1:-build/looplm}")
REPS=${2:-3}
STEPS=${3:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/text.txt" <<'PY'
import random, sys
chars = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
r = random.Random(0)
open(sys.argv[1], "w").write("".join(r.choice(chars) for _ in range(400000)))
PY
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
ARGS=(--preset bench-dense --data "$work/text.txt" --steps "$STEPS" --set grad_accum=2 --set eval_every=100000
      --set eval_batches=1 --sample-len 0 --quiet)
med() {  # FIELD DIR: the median over the training steps after the first two of metrics.jsonl's FIELD
  python3 -c '
import json, statistics, sys
v = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
v = [j[sys.argv[1]] for j in v if j.get("split") == "train"][2:]
print(f"{statistics.median(v):.4g}")
' "$1" "$2" 2>/dev/null || echo nan
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
one=() two=() red=()
for i in $(seq "$REPS"); do
  "$BIN" train "${ARGS[@]}" -t 2 --out "$work/one$i" >/dev/null 2>&1
  one+=("$(med tokens_per_s "$work/one$i")")
  "${MPI[@]}" -np 2 "$BIN" train "${ARGS[@]}" -t 1 --out "$work/two$i" >/dev/null 2>&1
  two+=("$(med tokens_per_s "$work/two$i")")
  red+=("$(med allreduce_s "$work/two$i")")
  echo "run $i: 1 x 2 threads ${one[-1]} tokens/s, 2 ranks x 1 thread ${two[-1]} tokens/s (allreduce ${red[-1]} s/step); load $(cut -d' ' -f1 /proc/loadavg)"
done
m1=$(printf '%s\n' "${one[@]}" | sort -g | sed -n "$(( (REPS + 1) / 2 ))p")
m2=$(printf '%s\n' "${two[@]}" | sort -g | sed -n "$(( (REPS + 1) / 2 ))p")
echo "median: 1 x 2 threads $m1 tokens/s, 2 ranks x 1 thread $m2 tokens/s, ratio $(python3 -c "print(f'{$m2/$m1:.3f}')")"
for mb in 0.25 1 4 16 64; do
  "${MPI[@]}" -np 2 "$BIN" train "${ARGS[@]}" -t 1 --allreduce-bucket-mb "$mb" --out "$work/bucket$mb" >/dev/null 2>&1
  echo "bucket $mb MiB: allreduce $(med allreduce_s "$work/bucket$mb") s/step"
done
