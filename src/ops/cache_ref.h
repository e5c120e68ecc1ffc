// How a generation pass meets its KV cache (docs/cli.md, generate). A pass holds B batch rows of T
// new tokens each; RowPlace says where each row sits (llama.cpp's llama_batch idea: every row its
// own position and sequence), CacheRef is one (block, loop step)'s cache as an op sees it.
#pragma once

namespace looplm::op {

struct RowPlace {
  int pos0 = 0;               // every row's first position, unless `pos`
  const int* pos = nullptr;   // [B]: position of batch row b's first token
  const int* rows = nullptr;  // [B]: the cache row (sequence) of batch row b; null: b
  RowPlace() = default;
  RowPlace(int p0) : pos0(p0) {}  // NOLINT: a plain position converts
  int at(int b) const { return pos ? pos[b] : pos0; }
  int row(int b) const { return rows ? rows[b] : b; }
};

// Keys (rotated) and values of one (block, loop step), each [sequences, heads, capacity, width /
// heads]: head-major, so that one decode step's pass over a head's keys reads one contiguous run
// (position-major, a head's 64 values sat a whole position apart, and a batch's passes over
// several caches ran at memory latency instead of the prefetched stream). Elements fp32; bf16 (half
// the bytes each attention pass reads; values rounded to nearest even on write); or int8, a
// quarter, each position's head vector as codes c and one fp32 scale d (x ≈ d · c, d = max|x| /
// 127, c = round(x / d): k::quantize_kv_row), the scales in k_scale / v_scale [sequences, heads, capacity].
enum class KvElem { f32, bf16, i8 };
struct CacheRef {
  void* k = nullptr;
  void* v = nullptr;
  int capacity = 0;
  int width = 0;       // values per position (all heads)
  // >= 0: the `mean` KV policy, one slot for every loop step: a new key/value is averaged into
  // its position as the (mean_step + 1)-th sample (mean_step 0 overwrites).
  int mean_step = -1;
  bool write = true;  // false: the new keys/values are already there (CEM's inner steps reuse them)
  KvElem elem = KvElem::f32;
  float* k_scale = nullptr;  // int8: per (sequence, head, position)
  float* v_scale = nullptr;
  explicit operator bool() const { return k != nullptr; }
};

}  // namespace looplm::op
