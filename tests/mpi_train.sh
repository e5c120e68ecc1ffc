#!/usr/bin/env bash
# Data-parallel training under mpirun (docs/training.md, "Data parallel (MPI)"): 2 ranks give one
# process's run bit for bit (checkpoint bytes, metrics' losses) for grad_accum 2, 4 (butterfly) and
# 6 (blocks of 3: the gathered tree), and in bf16 where the CPU has it, also over TCP; a repeated run is identical; a checkpoint of 2
# ranks resumes bit-exactly with 1 or 2; a rank killed with SIGKILL ends the job non-zero within
# 30 s and the run resumes; Ctrl-C checkpoints the step all ranks stopped at; ranks with different
# data or configs are refused; grad_accum 3 on 2 ranks exits 2.
# Skipped (exit 77) without mpirun or when looplm was built without MPI.
# Usage: tests/mpi_train.sh LOOPLM_BINARY LOOPLM_HAVE_MPI(ON|OFF)
set -euo pipefail
BIN=$(realpath "$1")
if [ "${2:-OFF}" != ON ]; then echo "SKIP: looplm was built without MPI (libopenmpi-dev missing, or -DLOOPLM_MPI=OFF)"; exit 77; fi
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: no mpirun (openmpi-bin)"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# --bind-to none: two ranks on a 2-core machine beside other work must not be pinned to one core.
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
fail() { echo "FAIL: $*" >&3; exit 1; }
exec 3>&1 >/dev/null  # the runs' reports (stdout) are not the test's; its own lines go to fd 3
say() { echo "$@" >&3; }

python3 - "$work" <<'PY'
import random, sys
words = "in the beginning god created heaven and earth light darkness water firmament day night".split()
for name, seed in (("text.txt", 1), ("other.txt", 2)):
    r = random.Random(seed)
    open(f"{sys.argv[1]}/{name}", "w").write(" ".join(r.choice(words) for _ in range(6000)))
PY
COMMON=(--preset looped --set d_model=32 --set n_heads=2 --set context=32 --set batch_size=2 --set R=2
        --set n_core=1 --set warmup=2 --set eval_every=3 --set eval_batches=3 --set log_every=1
        --data "$work/text.txt" --sample-len 0 --quiet)

# The numbers that must be equal: every loss, norm and validation in metrics.jsonl.
losses() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    print(j["step"], j["split"], repr(j.get("loss")), repr(j.get("grad_norm")), repr(j.get("val_loss")), j.get("val_loss_by_depth"))
' "$1/metrics.jsonl"
}
same_run() {  # DIR_A DIR_B WHAT
  cmp -s "$1/model.safetensors" "$2/model.safetensors" || fail "$3: the weights differ"
  for f in "$1"/checkpoints/train_state_step*.safetensors; do
    cmp -s "$f" "$2/checkpoints/$(basename "$f")" || fail "$3: $(basename "$f") differs"
  done
  [ "$(losses "$1")" = "$(losses "$2")" ] || { diff <(losses "$1") <(losses "$2") | head >&3; fail "$3: the metrics differ"; }
  say "ok: $3"
}

for ga in 2 4 6; do
  "$BIN" train "${COMMON[@]}" --steps 6 --set grad_accum=$ga -t 2 --out "$work/one_$ga"
  "${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --steps 6 --set grad_accum=$ga -t 1 --out "$work/two_$ga"
  same_run "$work/one_$ga" "$work/two_$ga" "grad_accum $ga: 2 ranks = 1 process"
done
# Without --quiet the run says it is data parallel.
LOUD=()
for a in "${COMMON[@]}"; do [ "$a" = --quiet ] || LOUD+=("$a"); done
"${MPI[@]}" -np 2 "$BIN" train "${LOUD[@]}" --steps 1 --set grad_accum=2 -t 1 --out "$work/loud" >"$work/loud.log" 2>&1 ||
  { cat "$work/loud.log" >&3; fail "the run without --quiet failed"; }
grep -q "data parallel: 2 ranks" "$work/loud.log" || { cat "$work/loud.log" >&3; fail "no 'data parallel: 2 ranks' line"; }
say "ok: $(grep -m1 -o 'data parallel: .*' "$work/loud.log")"
# bf16 products (docs/numerics.md) are as thread- and rank-independent as fp32's, where the CPU has them.
if grep -qw avx512_bf16 /proc/cpuinfo; then
  "$BIN" train "${COMMON[@]}" --steps 6 --set grad_accum=2 --set precision=bf16 -t 2 --out "$work/one_bf16"
  "${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --steps 6 --set grad_accum=2 --set precision=bf16 -t 1 --out "$work/two_bf16"
  same_run "$work/one_bf16" "$work/two_bf16" "precision bf16: 2 ranks = 1 process"
fi
"${MPI[@]}" --mca btl self,tcp -np 2 "$BIN" train "${COMMON[@]}" --steps 6 --set grad_accum=4 -t 1 --out "$work/tcp"
same_run "$work/two_4" "$work/tcp" "2 ranks over TCP, a repeated run"

# Resume with another N: 2 ranks stop at step 3 (a checkpoint), then 1 rank or 2 ranks go on to 6.
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --steps 6 --set grad_accum=4 -t 1 --stop-after 3 --out "$work/half"
cp -r "$work/half" "$work/half2"
"$BIN" train "${COMMON[@]}" --steps 6 --set grad_accum=4 -t 2 --resume --out "$work/half"
same_run "$work/two_4" "$work/half" "2 ranks to step 3, resumed by 1 process to 6"
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --steps 6 --set grad_accum=4 -t 1 --resume --out "$work/half2"
same_run "$work/two_4" "$work/half2" "2 ranks to step 3, resumed by 2 ranks to 6"

# A rank killed: the job ends (non-zero, within 30 s), the last checkpoint resumes.
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --steps 100000 --set grad_accum=2 --set eval_every=2 -t 1 \
  --out "$work/killed" >"$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 300); do [ -f "$work/killed/checkpoint.json" ] && break; sleep 0.1; done
[ -f "$work/killed/checkpoint.json" ] || fail "no checkpoint before the kill"
rank1=""
for p in $(ps -o pid= --ppid "$job"); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1; then rank1=$p; fi
done
[ -n "$rank1" ] || fail "rank 1 of the job not found"
t0=$(date +%s)
kill -KILL "$rank1"
rc=0
wait "$job" || rc=$?
dt=$(( $(date +%s) - t0 ))
[ "$rc" -ne 0 ] || fail "the job ended with 0 after a rank was killed"
[ "$dt" -le 30 ] || fail "the job took ${dt}s to end after a rank was killed"
step=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$work/killed/checkpoint.json")
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --steps 100000 --set grad_accum=2 --set eval_every=2 -t 1 --resume \
  --stop-after $((step + 2)) --out "$work/killed" || fail "the run did not resume after the kill"
say "ok: rank 1 killed: the job ended with $rc after ${dt}s; resumed from step $step"

# Ctrl-C on mpirun: every rank stops after the same step, rank 0 writes its checkpoint.
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --steps 100000 --set grad_accum=2 --set eval_every=100000 -t 1 \
  --out "$work/stopped" >"$work/stopped.log" 2>&1 &
job=$!
for _ in $(seq 300); do [ -f "$work/stopped/metrics.jsonl" ] && [ "$(wc -l <"$work/stopped/metrics.jsonl")" -ge 5 ] && break; sleep 0.1; done
kill -INT "$job"
rc=0
wait "$job" || rc=$?
[ "$rc" -ne 0 ] || fail "mpirun interrupted exited 0"
step=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$work/stopped/checkpoint.json") ||
  { cat "$work/stopped.log" >&3; fail "no checkpoint after Ctrl-C"; }
last=$(python3 -c 'import json,sys; print(max(json.loads(l)["step"] for l in open(sys.argv[1])))' "$work/stopped/metrics.jsonl")
[ "$step" = "$last" ] || fail "Ctrl-C: the checkpoint is at step $step, the metrics end at $last"
say "ok: Ctrl-C on mpirun: checkpoint at step $step, mpirun exited $rc"

# Bad input: ranks reading other data; a grad_accum that 2 ranks cannot share.
rc=0
OTHER="$work/other.txt" TEXT="$work/text.txt" "${MPI[@]}" -x OTHER -x TEXT -np 2 sh -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then d=$OTHER; else d=$TEXT; fi; exec "$0" train --preset looped --set d_model=32 --set n_heads=2 --set context=32 --set batch_size=2 --set R=2 --set grad_accum=2 --quiet --steps 2 --data "$d" -t 1 --out "$1"' \
  "$BIN" "$work/mismatch" >"$work/mismatch.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$work/mismatch.log" >&3; fail "ranks with different data: exit $rc, not 1"; }
grep -q "disagree on the data" "$work/mismatch.log" || { cat "$work/mismatch.log" >&3; fail "no message naming the data"; }
say "ok: ranks with different data refused: $(grep -m1 -o 'the ranks disagree.*' "$work/mismatch.log" | cut -c1-150)"
rc=0
"${MPI[@]}" -np 2 sh -c 'exec "$0" train --preset looped --set d_model=32 --set n_heads=2 --set context=32 --set grad_accum=2 --set lr=0.00$((OMPI_COMM_WORLD_RANK + 1)) --quiet --steps 2 --data "$1" -t 1 --out "$2"' \
  "$BIN" "$work/text.txt" "$work/config_mismatch" >"$work/config_mismatch.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$work/config_mismatch.log" >&3; fail "ranks with different configs: exit $rc, not 1"; }
grep -q "rank 1 differs in lr" "$work/config_mismatch.log" || { cat "$work/config_mismatch.log" >&3; fail "no message naming lr"; }
say "ok: ranks with different configs refused, naming the key"
rc=0
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --steps 2 --set grad_accum=3 -t 1 --out "$work/ga3" >"$work/ga3.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$work/ga3.log" >&3; fail "grad_accum 3 on 2 ranks: exit $rc, not 2"; }
grep -q "cannot be shared by 2 ranks" "$work/ga3.log" || { cat "$work/ga3.log" >&3; fail "no message naming grad_accum"; }
say "ok: grad_accum 3 on 2 ranks exits 2"
