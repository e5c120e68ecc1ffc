#!/usr/bin/env bash
# scripts/prepare_corpus.sh end to end in its --small mode (docs/data.md, "A larger corpus"): the
# files and the manifest's hashes, a rerun that does nothing, two training steps of
# configs/corpus/looped.json (shrunk) on the shards, and experiments/scale.py and
# experiments/scale_systems.py --quick on them.
# Skipped (exit 77) when Debian's package registry is unreachable. Usage: tests/corpus_small.sh LOOPLM_BINARY
set -euo pipefail
BIN="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/probe"
if ! (cd "$work/probe" && apt-get download bible-kjv-text > /dev/null 2>&1); then
  echo "SKIP: apt-get download fails here (no network or no package lists): the corpus cannot be fetched"
  exit 77
fi
out="$work/corpus"
scripts/prepare_corpus.sh --small --out "$out" --bin "$BIN" --vocab-size 1024
for f in train.txt val.txt tokenizer.json train.bin val.bin corpus.json; do
  [ -s "$out/$f" ] || { echo "FAIL: $out/$f missing or empty"; exit 1; }
done
python3 - "$out" <<'PY'
import hashlib, json, os, sys
out = sys.argv[1]
m = json.load(open(os.path.join(out, "corpus.json")))
text = json.dumps(m)
for name in ("train.txt", "val.txt", "tokenizer.json", "train.bin", "val.bin"):
    h = hashlib.sha256(open(os.path.join(out, name), "rb").read()).hexdigest()
    assert h in text, f"{name}: sha256 {h} is not in the manifest"
train = open(os.path.join(out, "train.txt"), "rb").read()
val = open(os.path.join(out, "val.txt"), "rb").read()
assert len(val) > 0 and len(train) > 50 * len(val), (len(train), len(val))
tv = set(l for l in train.split(b"\n") if len(l) >= 30)
both = [l for l in val.split(b"\n") if len(l) >= 30 and l in tv]
assert not both, f"{len(both)} validation lines are in train, e.g. {both[0][:80]!r}"
print("manifest hashes match; validation shares no line of 30+ bytes with training")
PY
before=$(stat -c %Y "$out/corpus.json")
scripts/prepare_corpus.sh --small --out "$out" --bin "$BIN" --vocab-size 1024 | tail -1
[ "$(stat -c %Y "$out/corpus.json")" = "$before" ] || { echo "FAIL: a rerun rewrote the corpus"; exit 1; }
"$BIN" train --config configs/corpus/looped.json --set vocab_size=1024 --set d_model=32 --set n_heads=2 \
  --set context=32 --set batch_size=2 --set steps=2 --set eval_every=2 --set eval_batches=1 \
  --set tokenizer_file="$out/tokenizer.json" --set data_train="$out/train.bin" --set data_val="$out/val.bin" \
  --out "$work/run" 2>&1 | tail -2
[ -s "$work/run/model.safetensors" ] || { echo "FAIL: no checkpoint"; exit 1; }
# experiments/scale.py end to end on this corpus (--quick: tiny models, a few steps; one process, as
# mpi_train covers the ranks), then again: every run is reused from its summary, nothing retrained.
LOOPLM_BIN="$BIN" python3 experiments/scale.py --quick --corpus "$out" --ranks 1 --runs "$work/scale_runs" \
  --out "$work/scale" | tail -1
[ "$(ls "$work/scale/runs" | wc -l)" = 10 ] || { echo "FAIL: scale.py wrote $(ls "$work/scale/runs" | wc -l) run summaries, not 10"; exit 1; }
grep -q "^Depth check: dense 6" "$work/scale/results.md" || { echo "FAIL: no depth check in scale.py's results.md"; exit 1; }
rm -rf "$work/scale_runs"
LOOPLM_BIN="$BIN" python3 experiments/scale.py --quick --corpus "$out" --ranks 1 --runs "$work/scale_runs" \
  --out "$work/scale" > "$work/scale2.log"
! grep -q "trained" "$work/scale2.log" || { echo "FAIL: scale.py trained again runs it had finished"; exit 1; }
# experiments/scale_systems.py likewise for one system (NRGPT: three arms, two seeds, and a third
# seed where two arms come out close), then its tables again from the kept summaries alone.
LOOPLM_BIN="$BIN" python3 experiments/scale_systems.py --system nrgpt --quick --corpus "$out" --ranks 1 \
  --runs "$work/sys_runs" --out "$work/sys" | tail -1
grep -q "^Depth check: GPT_Rec" "$work/sys/results.md" || { echo "FAIL: no depth check in scale_systems.py's results.md"; exit 1; }
grep -q "Claim: NRGPT's loss is comparable" "$work/sys/results.md" || { echo "FAIL: no NRGPT claim in results.md"; exit 1; }
cp "$work/sys/results.md" "$work/sys_first.md"
LOOPLM_BIN="$BIN" python3 experiments/scale_systems.py --system nrgpt --quick --corpus "$out" --ranks 1 \
  --runs "$work/sys_runs" --out "$work/sys" --tables-only > /dev/null
cmp -s "$work/sys/results.md" "$work/sys_first.md" || { echo "FAIL: --tables-only changed results.md"; exit 1; }
echo "PASS"
