#!/usr/bin/env bash
# Loss curves of a training run as a PNG: the training loss per step and the validation loss at
# every exit r = 1..R per evaluation, from RUN/metrics.jsonl.
#   scripts/plot_metrics.sh RUN [OUT.png]      (default OUT: RUN/loss.png; needs gnuplot: apt-get install gnuplot-nox)
set -euo pipefail
run="${1:?usage: scripts/plot_metrics.sh RUN [OUT.png]}"
out="${2:-$run/loss.png}"
metrics="$run/metrics.jsonl"
[ -f "$metrics" ] || { echo "plot_metrics: no $metrics (is $run a looplm run directory?)" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot_metrics: gnuplot is not installed; install it with: sudo apt-get install gnuplot-nox (scripts/install_deps.sh does)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# metrics.jsonl -> train.tsv (step loss) and val.tsv (step, loss at exit 1..R)
python3 - "$metrics" "$tmp" <<'PY'
import json, sys
src, d = sys.argv[1], sys.argv[2]
train, val = [], []
for line in open(src):
    line = line.strip()
    if not line:
        continue
    j = json.loads(line)
    if "val_loss_by_depth" in j:
        val.append([j["step"]] + j["val_loss_by_depth"])
    elif "loss" in j:
        train.append((j["step"], j["loss"]))
with open(f"{d}/train.tsv", "w") as f:
    f.writelines(f"{s}\t{l}\n" for s, l in train)
with open(f"{d}/val.tsv", "w") as f:
    f.writelines("\t".join(map(str, r)) + "\n" for r in val)
exits = max((len(r) - 1 for r in val), default=0)
open(f"{d}/exits", "w").write(str(exits))
PY
exits="$(cat "$tmp/exits")"
plots="'$tmp/train.tsv' using 1:2 with lines lw 1 lc rgb '#999999' title 'train'"
# One colour per exit, light (r = 1) to dark (the last), with its own point shape: curves that lie
# close together stay apart on paper and in grey.
colours=('#fdd49e' '#fdbb84' '#fc8d59' '#ef6548' '#d7301f' '#b30000' '#7f0000' '#4d0000')
for ((r = 1; r <= exits; r++)); do
  c=${colours[$(( (r - 1) * ${#colours[@]} / (exits > 0 ? exits : 1) ))]}
  plots+=", '$tmp/val.tsv' using 1:$((r + 1)) with linespoints lw 2 lc rgb '$c' pt $(( (r - 1) % 13 + 1 )) ps 0.8 title 'val, exit r = $r'"
done
gnuplot <<GP
set terminal pngcairo size 1000,600 noenhanced
set output '$out'
set title 'looplm: $run'
set xlabel 'step'
set ylabel 'loss (nats per token)'
set key top right
set grid
plot $plots
GP
echo "wrote $out"
