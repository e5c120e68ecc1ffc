// Incremental decoding of several sequences at once (SPEC §3): a KV cache with one row per
// sequence, each with its own length, and one batched pass per new token. With an exit rule the
// decoder steps the rows through the loop itself: a token leaves the batch at its exit, and the
// KV policy says what later tokens read for the steps it did not run. Generation and incremental
// scoring (eval --kv-policy) both run on it.
#pragma once
#include <cstdint>
#include <vector>

#include "infer/early_exit.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "ops/graph.h"

namespace looplm {

struct DecoderOptions {
  int depth = 0;  // loop steps (the prompt's, and each decoded token's at most)
  EarlyExit exit;
  KvPolicy policy = KvPolicy::per_step;
};

class Decoder {
 public:
  Decoder(const Model& m, int sequences, int capacity, const DecoderOptions& o);
  // Sequence `seq` restarts on ids[0..n) at positions 0..n-1; its last token's logits [V] at that
  // token's exit into `logits`. The prompt runs every loop step (its keys and values are exact
  // under every policy but mean, which averages them).
  void prefill(int seq, const int32_t* ids, int n, float* logits);
  // One new token for each of n distinct sequences seqs[i], each at its next position; the
  // logits [n, V] of each at its exit.
  void decode(const int* seqs, const int32_t* tokens, int n, float* logits);
  int length(int seq) const { return len_[seq]; }
  int capacity() const { return cache_.capacity(); }
  const KVCache& cache() const { return cache_; }
  // Decoded tokens, the loop steps they ran to their exits, and their exits by step (1..depth).
  int64_t decoded() const { return decoded_; }
  int64_t steps() const { return steps_; }
  const std::vector<int64_t>& exits() const { return exits_; }
  // Bytes of keys and values the policy needs per position, over every position written.
  double kv_bytes_per_token() const { return kept_positions_ ? kept_floats_ * sizeof(float) / kept_positions_ : 0; }

 private:
  bool exiting() const { return o_.exit.rule != ExitRule::fixed && o_.depth >= 1; }
  void keep(int steps_run, int64_t positions);  // the policy's bytes for positions that ran steps_run steps
  const Model& m_;
  DecoderOptions o_;
  KVCache cache_;
  Graph g_;
  std::vector<int> len_, pos_, act_seq_, act_pos_, active_;
  std::vector<float> state_, h_pre_, z_, h_;
  int64_t decoded_ = 0, steps_ = 0;
  std::vector<int64_t> exits_;
  double kept_floats_ = 0;
  int64_t kept_positions_ = 0;
};

}  // namespace looplm
