// The looplm model family (SPEC §1):
//   tokens → embed → prelude (once) → h_pre = h^(0) → h^(r) = LoopRule(h^(r-1), h_pre, core, r)
//   → coda (once) → norm_f → lm_head → logits
// Exit r (any r, also beyond the trained R) = h^(r) → coda → norm_f → lm_head.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "infer/kv_cache.h"
#include "looplm/config.h"
#include "model/block.h"
#include "model/loop_rule.h"
#include "model/params.h"

namespace looplm {

struct RunOptions {
  int depth = -1;          // loop steps; -1 -> config R
  int grad_steps = -1;     // truncated BPTT: only the last k loop steps keep gradients; -1 -> all
  bool training = false;   // training-only terms (noise)
  uint64_t step = 0;       // training step (seeds per-step randomness)
  KVCache* cache = nullptr;  // generation: per (block, loop step) cache
  int pos0 = 0;              // generation: position of the first token
};

class Model {
 public:
  explicit Model(const Config& c);  // registers and binds parameters (all zero)
  void init_weights(uint64_t seed);  // SPEC §1 init rules

  const Config& config() const { return cfg_; }
  ParamStore& params() { return ps_; }
  const ParamStore& params() const { return ps_; }
  int64_t n_params() const { return (int64_t)ps_.total(); }

  // Embedding, prelude and `depth` loop steps: returns h^(depth). on_state(r, h^(r)) is called for
  // r = 0 (h_pre) .. depth, e.g. to read every exit.
  Node* trunk(Graph& g, const int32_t* tokens, int B, int T, const RunOptions& o,
              const std::function<void(int, Node*)>& on_state = {}) const;
  // coda → norm_f → lm_head: logits [B*T, V] of a loop state.
  Node* head(Graph& g, Node* h, int B, int T, const RunOptions& o) const;
  Node* logits(Graph& g, const int32_t* tokens, int B, int T, const RunOptions& o) const {
    return head(g, trunk(g, tokens, B, T, o), B, T, o);
  }

  // Forward FLOPs per token at depth r (matmuls + attention scores, causal average), for bench.
  double flops_per_token(int depth) const;

 private:
  BlockCtx ctx(int B, int T, const RunOptions& o, int block, int step) const;
  Config cfg_;
  ParamStore ps_;
  std::vector<std::unique_ptr<Block>> prelude_, core_, coda_;
  std::unique_ptr<LoopRule> rule_;
  std::unique_ptr<Norm> norm_f_;
  int tok_emb_ = -1, pos_emb_ = -1, lm_head_w_ = -1, lm_head_b_ = -1;
  Node *E_ = nullptr, *P_ = nullptr, *Wlm_ = nullptr, *blm_ = nullptr;
  std::unique_ptr<RopeTable> rope_;
};

}  // namespace looplm
