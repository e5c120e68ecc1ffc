// Incremental decoding of several sequences at once (docs/numerics.md, Batched decoding): a KV
// cache with one row per sequence, each with its own length, and one batched pass per new token.
// With an exit rule the decoder steps the rows through the loop itself: a token leaves the batch at
// its exit, and the KV policy says what later tokens read for the steps it did not run. Generation
// and incremental scoring (eval --kv-policy) both run on it.
#pragma once
#include <cstdint>
#include <vector>

#include "infer/early_exit.h"
#include "io/json_input.h"
#include "looplm/error.h"
#include "looplm/looplm.h"
#include "model/model.h"
#include "ops/graph.h"

namespace looplm {

struct DecoderOptions {
  int depth = 0;  // loop steps (the prompt's, and each decoded token's at most)
  EarlyExit exit;
  KvPolicy policy = KvPolicy::per_step;
  // Self-speculative decoding (1 ≤ draft_depth < depth): draft() runs a token through the first
  // draft_depth loop steps only, sharing their cache; prefill and verify also write the coda's keys
  // at exit draft_depth, which the drafts read.
  int draft_depth = 0;
  op::KvElem kv = op::KvElem::f32;  // the KV cache's element (GenerateOptions::kv_cache)
};

// GenerateOptions::kv_cache (EvalOptions::kv_cache) as DecoderOptions::kv (a usage error naming
// the choices when it is none of them; the table is in decoder.cpp, available_kv_caches lists it).
op::KvElem kv_element(const std::string& kv_cache);


class Decoder {
 public:
  Decoder(const Model& m, int sequences, int capacity, const DecoderOptions& o);
  // Sequence `seq` restarts on ids[0..n) at positions 0..n-1; its last token's logits [V] at that
  // token's exit into `logits`. The prompt runs every loop step (its keys and values are exact
  // under every policy but mean, which averages them).
  void prefill(int seq, const int32_t* ids, int n, float* logits);
  // One new token for each of n distinct sequences seqs[i], each at its next position; the
  // logits [n, V] of each at its exit, and (`steps`, when given) the loop steps each ran to it.
  void decode(const int* seqs, const int32_t* tokens, int n, float* logits, int* steps = nullptr);
  // Speculative decoding, one sequence (loop-as-draft): draft() feeds one token through the first
  // draft_depth loop steps (logits [V] at that exit) and keeps its state there; verify_drafts()
  // takes the n tokens drafted from position `from` on through the remaining steps draft_depth+1
  // .. depth in one pass from those states (logits [n, V], one per token): steps 1..draft_depth are
  // not run again, since a draft's states and keys there are the full model's. truncate() drops
  // positions ≥ len (and the drafts kept there).
  void draft(int seq, int32_t token, float* logits);
  void verify_drafts(int seq, int from, int n, float* logits);
  void truncate(int seq, int len) {
    len_[seq] = std::min(len_[seq], len);
    drafted_ = std::min(drafted_, std::max(0, len - draft_from_));
  }
  int length(int seq) const { return len_[seq]; }
  int capacity() const { return cache_.capacity(); }
  const KVCache& cache() const { return cache_; }
  // Decoded tokens, the loop steps they ran to their exits, and their exits by step (1..depth).
  int64_t decoded() const { return decoded_; }
  // Loop steps run as passes over the loop's weights since the prompt (a pass of n rows through
  // r steps counts r): what decoding streams from memory (GenerateStats::weight_streams).
  int64_t loop_passes() const { return loop_passes_; }
  int64_t steps() const { return steps_; }
  // Loop steps computed for decoded tokens, each row of each pass: steps() plus those a KV policy
  // that keeps exited tokens running (per_step) runs after their exits, for the cache.
  int64_t computed_steps() const { return computed_steps_; }
  const std::vector<int64_t>& exits() const { return exits_; }
  // Bytes of keys and values the policy needs per position, over every position written.
  double kv_bytes_per_token() const { return kept_positions_ ? kept_floats_ * cache_.bytes_per_value() / kept_positions_ : 0; }

 private:
  bool exiting() const { return o_.exit.rule != ExitRule::fixed && o_.depth >= 1; }
  // A full-depth pass over n tokens of `seq` from `from`, writing the coda at every exit tokens can
  // read it from; the last token's logits (or all n, `all`) at its exit into `logits`.
  void run_full(int seq, int from, const int32_t* ids, int n, float* logits, bool all);
  // One sequence's tokens from position `from` through `depth` steps, on this decoder's cache
  // (`seq` is read through its address: it must outlive the pass).
  RunOptions at(const int& seq, int from, int depth);
  void keep(int steps_run, int64_t positions);  // the policy's bytes for positions that ran steps_run steps
  // 1 (one thread, core/threads.h ThreadCap) for a step of `rows` tokens of `token_flops` each
  // below the packed weights' WeightFormat::serial_decode_flops (fp32's when unpacked), else 0 (no cap).
  int thread_cap(int rows, double token_flops) const;
  const Model& m_;
  DecoderOptions o_;
  double token_flops_, draft_flops_;  // FLOPs per token at depth and at draft_depth
  KVCache cache_;
  Graph g_;
  ExitTracker tracker_;  // the rows of the current pass through their exits (early exit only)
  std::vector<int> len_, pos_, act_seq_, act_pos_, active_;
  std::vector<int> active_row_;  // a running row's place in the current step's batch
  std::vector<float> state_, h_pre_, z_, h_, gate_;  // gate_: the exit gate's λ per row (the gate rule)
  // The drafts since the last verification: positions draft_from_ .. draft_from_ + drafted_ − 1,
  // their loop state after draft_depth steps and their h_pre (rows of draft_state_, draft_h_pre_).
  int draft_from_ = 0, drafted_ = 0;
  std::vector<float> draft_state_, draft_h_pre_;
  int64_t decoded_ = 0, steps_ = 0, loop_passes_ = 0, computed_steps_ = 0;
  std::vector<int64_t> exits_;
  double kept_floats_ = 0;
  int64_t kept_positions_ = 0;
};

}  // namespace looplm
