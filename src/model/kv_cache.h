// KV cache keyed by (block, loop step) (docs/cli.md, generate): every application of a shared core
// block keeps its own keys and values — sharing one cache across loop steps is a known bug elsewhere.
// Rows are sequences, each with its own positions (batched generation).
//
// Layout: prelude blocks one slot each; core blocks `core_steps` slots (loop steps 0..); coda
// blocks `coda_steps` slots (one per exit when tokens exit early, since the coda's keys at exit r
// come from the state of step r).
//
// The cache owns the KV policy (what is kept for the steps a token that exited early did not run;
// docs/cli.md): its slot map (mean: one slot per block for every step, each position the running
// mean of the steps it ran), the "token exited" hook (last / first: later steps' slots take a copy
// of that step's), whether an exited token keeps running for its keys and values (per_step), and
// the slots a token holds. The decoder asks; no other place branches on the policy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "looplm/config.h"
#include "looplm/types.h"
#include "ops/cache_ref.h"

namespace looplm {

class KVCache {
 public:
  // `rows` sequences of up to `capacity` positions; `width` values per position for keys and for
  // values (0: Config::kv_width; Model::kv_width for blocks with wider attention), split into Config::kv_heads heads, as `elem` (cache_ref.h).
  KVCache(const Config& c, int rows, int capacity, int core_steps, int64_t width = 0, int coda_steps = 1,
          KvPolicy policy = KvPolicy::per_step, op::KvElem elem = op::KvElem::f32);
  // block: index over prelude, core, coda in order; step: 0-based loop step for core blocks, exit
  // index for coda blocks, 0 for prelude blocks.
  op::CacheRef slot(int block, int step) const;
  int capacity() const { return capacity_; }
  size_t bytes() const { return data_size_; }
  // Bytes of one stored element (4, 2, 1), and per value with int8's scale shared out (1 + 4 / head width).
  size_t element_bytes() const { return elem_ == op::KvElem::f32 ? 4 : elem_ == op::KvElem::bf16 ? 2 : 1; }
  double bytes_per_value() const;
  KvPolicy policy() const { return policy_; }
  // The policy's hook for a token (sequence `row`, position `pos`) that exited at loop step `step`
  // of `depth`: last / first give the later steps' slots a copy of that step's / the first step's
  // keys and values; per_step and mean need nothing.
  void token_exited(int row, int pos, int step, int depth);
  // per_step: a token that exited keeps running the later steps for their keys and values (exact);
  // the other policies let it leave the batch.
  bool exited_tokens_keep_running() const { return policy_ == KvPolicy::per_step; }
  // Slots of keys and values one position holds when its token ran `steps_run` loop steps of
  // `depth` (`per_exit`: the coda keeps one slot per exit): what the policy keeps, for accounting.
  int64_t slots_per_position(int steps_run, int depth, bool per_exit) const;

 private:
  // Position `pos` of sequence `row` in every step-dependent slot of steps from.. takes a copy of step `src`.
  void replicate(int row, int pos, int src, int from);

 private:
  int n_prelude_, n_core_, n_coda_, n_heads_, rows_, capacity_, core_steps_, coda_steps_;
  KvPolicy policy_;
  bool averaged_;  // mean
  op::KvElem elem_;
  int64_t width_;
  size_t slots_per_position_;
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char[], Free> data_;  // every slot's keys and values, then (int8) their scales (calloc'd)
  size_t data_size_ = 0;
  std::vector<op::CacheRef> slots_;
};

}  // namespace looplm
