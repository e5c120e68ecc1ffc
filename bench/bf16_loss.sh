#!/usr/bin/env bash
# Held-out loss of bf16 training against fp32 (docs/numerics.md, "bf16 training"): the `looped`
# preset trained STEPS steps (default 1000, the schedule shortened to match) in both precisions for
# each seed, each run in OUT/<precision>_seed<S> (resumable: a finished run is kept), then one line
# per seed and the mean relative difference of the final validation loss.
#   bench/bf16_loss.sh [--steps N] [--seeds "1 2 3"] [--out DIR] [--looplm build/looplm]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=1000 seeds="1 2 3" out=runs/bf16_loss looplm=build/looplm
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --looplm) looplm=$2; shift 2 ;;
    *) echo "usage: bench/bf16_loss.sh [--steps N] [--seeds \"1 2 3\"] [--out DIR] [--looplm PATH]" >&2; exit 2 ;;
  esac
done
final_val() { grep '"split":"val"' "$1/metrics.jsonl" | tail -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["val_loss"])'; }
echo "| seed | fp32 val loss | bf16 val loss | bf16 / fp32 - 1 |"
echo "|---|---|---|---|"
diffs=()
for s in $seeds; do
  for p in fp32 bf16; do
    dir=$out/${p}_seed$s
    "$looplm" train --preset looped --set steps="$steps" --set eval_every="$steps" --set seed="$s" \
      --set precision=$p --out "$dir" --resume --quiet >/dev/null
  done
  f=$(final_val "$out/fp32_seed$s") b=$(final_val "$out/bf16_seed$s")
  d=$(python3 -c "print(f'{$b / $f - 1:+.4%}')")
  diffs+=("$(python3 -c "print($b / $f - 1)")")
  echo "| $s | $f | $b | $d |"
done
python3 -c "import statistics as s; v=[float(x) for x in '${diffs[*]}'.split()]; print(f'mean {s.mean(v):+.4%}, spread (sd) {s.pstdev(v):.4%} over {len(v)} seeds')"
