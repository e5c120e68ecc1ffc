// KV cache keyed by (block, loop step) (SPEC §3): every application of a shared core block keeps
// its own keys and values — sharing one cache across loop steps is a known bug elsewhere.
// Policy here is `per_step` (exact).
#pragma once
#include <cstddef>
#include <vector>

#include "looplm/config.h"

namespace looplm {

// One (block, loop step)'s cache: rotated keys and values, [B, capacity, width] each.
struct KVSlot {
  float* k = nullptr;
  float* v = nullptr;
  int capacity = 0;
};

class KVCache {
 public:
  // B sequences, up to `capacity` positions, core loop steps up to max_depth; `width` floats per
  // position for keys and for values (0: d_model; Model::kv_width for blocks with wider attention).
  KVCache(const Config& c, int B, int capacity, int max_depth, int64_t width = 0);
  // block: index over prelude, core, coda in order; step: loop step (0-based) for core blocks, 0 otherwise.
  const KVSlot* slot(int block, int step) const;
  int capacity() const { return capacity_; }
  int max_depth() const { return max_depth_; }
  size_t bytes() const { return data_.size() * sizeof(float); }
  int length = 0;  // positions filled

 private:
  int n_prelude_, n_core_, capacity_, max_depth_;
  std::vector<float> data_;
  std::vector<KVSlot> slots_;
};

}  // namespace looplm
