// The looplm model family (docs/systems.md, One family):
//   tokens → embed → prelude (once) → h_pre → state = init_state(h_pre)
//   → state = LoopRule.step(state, h_pre, core, r) for r = 1..depth → h = readout(state)
//   → coda (once) → norm_f → lm_head → logits
// Exit r (any r, also beyond the trained R) = readout(state after step r) → coda → norm_f → lm_head.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "looplm/config.h"
#include "model/block.h"
#include "model/kv_cache.h"
#include "model/loop_rule.h"
#include "model/params.h"
#include "model/rope.h"

namespace looplm {

struct RunOptions {
  int depth = -1;          // loop steps; -1 -> config R
  int grad_steps = -1;     // truncated BPTT: only the last k loop steps keep gradients; -1 -> all
  bool training = false;   // training-only terms (noise)
  uint64_t step = 0;       // training step and micro-batch (key the random terms: LoopCtx::rng)
  int micro = 0;
  KVCache* cache = nullptr;  // generation: per (block, loop step) cache
  op::RowPlace place;        // generation: each batch row's first position and cache row
  int coda_step = 0;         // generation: the coda's cache slot (the exit index when tokens exit early)
};

// Where a model's parameter values live.
struct ParamStorage {
  bool grads = true;                    // training: gradients too
  float* external = nullptr;            // inference: use these values (e.g. a mapped checkpoint)
  std::shared_ptr<const io::Bytes> owner;  // ... kept alive by this (its pages released once packed)
};

class Model {
 public:
  // Builds the components (registering every parameter) and allocates or attaches the values.
  explicit Model(const Config& c, ParamStorage storage = {});
  // The parameters a config declares (names, shapes, init), without allocating anything: a
  // checkpoint is checked against this before a model is built from it.
  static std::vector<ParamInfo> layout(const Config& c);

  void init_weights(uint64_t seed) { ps_.init(seed); }  // every parameter from its declared Init
  // Inference: make each weight matrix's copy in `format` (fp32: in place), read by forward passes
  // without gradients from then on.
  void prepare_inference(const WeightFormat& format) { ps_.pack(format); }

  const Config& config() const { return cfg_; }
  ParamStore& params() { return ps_; }
  const ParamStore& params() const { return ps_; }
  int64_t n_params() const { return (int64_t)ps_.total(); }

  // Embedding, prelude and `depth` loop steps: returns h^(depth) = readout(state). on_exit(r, h^(r))
  // is called for r = 0 (h_pre) .. depth, e.g. to read every exit; it must be done with h^(r) when
  // it returns (the memory of a step without gradients is reused). Loop steps without gradients
  // (all of them when gradients are off; the early ones under truncated BPTT) keep only the state,
  // and blocks without gradients only their output, so memory does not grow with depth.
  Node* trunk(Graph& g, const int32_t* tokens, int B, int T, const RunOptions& o,
              const std::function<void(int, Node*)>& on_exit = {}) const;
  // coda → norm_f → lm_head: logits [B*T, V] of a hidden state (`final_hidden`, when given,
  // gets what the lm_head reads: the exit gate's input).
  Node* head(Graph& g, Node* h, int B, int T, const RunOptions& o, Node** final_hidden = nullptr) const;
  // head() in its two parts: coda → norm_f (the final hidden state [B*T, d]), and the lm_head on
  // any rows of it (generation with the gate or latent exit needs logits only where a token exits).
  Node* final_hidden(Graph& g, Node* h, int B, int T, const RunOptions& o) const;
  Node* lm_head(Graph& g, Node* final_hidden) const;
  // Each row's next-token loss [rows, 1] at the lm_head, without keeping the logits
  // (op::head_token_loss): the exit gate's objectives read every exit this way.
  Node* head_loss(Graph& g, Node* final_hidden, const int32_t* targets) const;
  // The learned exit gate (config exit_gate, any loop rule; Ouro's form): λ_r = σ(w · x_r + b) [B*T, 1],
  // the probability of exiting at step r given that no earlier step exited, from exit r's final
  // hidden state x_r (head()'s final_hidden: what the lm_head reads); nullptr without a gate.
  // exit_gate_logit is w · x_r + b (the stage II loss works on it: stable at λ near 0 or 1).
  Node* exit_gate(Graph& g, Node* final_hidden) const;
  Node* exit_gate_logit(Graph& g, Node* final_hidden) const;
  bool has_exit_gate() const { return gate_w_ >= 0; }
  // The trunk in pieces, for generation that steps rows through the loop itself (per-token early
  // exit): embedding + prelude -> h_pre; the loop rule's initial state; one loop step r (1-based);
  // the exit's hidden state. A loop state has one row per token (LoopRule), so a caller may keep
  // any subset of the rows from one step to the next.
  Node* embed(Graph& g, const int32_t* tokens, int B, int T, const RunOptions& o) const;
  Node* init_state(Graph& g, Node* h_pre, int T, const RunOptions& o) const;  // h_pre [B·T, d]
  Node* loop_step(Graph& g, Node* state, Node* h_pre, int r, int B, int T, const RunOptions& o) const;
  Node* readout(Graph& g, Node* state) const { return rule_->readout(g, state); }
  Node* logits(Graph& g, const int32_t* tokens, int B, int T, const RunOptions& o) const {
    return head(g, trunk(g, tokens, B, T, o), B, T, o);
  }

  // Forward FLOPs per token at depth r: every block application, the loop rule's own maps at
  // every step and the lm_head (matrix products and attention at its causal average; each
  // component counts its own: Block / LoopRule::flops_per_token).
  double flops_per_token(int depth) const;
  double head_flops_per_token() const { return 2.0 * cfg_.d_model * cfg_.vocab_size; }
  // The parts: one application of each section's blocks (summed over the section) and one step
  // of the loop rule.
  struct FlopParts { double prelude = 0, core = 0, coda = 0, rule = 0, head = 0; };
  FlopParts flop_parts() const;
  // Floats per position of the widest block's KV cache, and whether a block diagnoses its input
  // state (Block::kv_width, Block::diagnoses_input).
  int64_t kv_width() const;
  bool diagnoses_input() const;
  // The components of a config without any values (layout, FLOPs; `looplm info`).
  static std::unique_ptr<Model> skeleton(const Config& c);

 private:
  Model(const Config& c, ParamStorage storage, int layout_only);  // components only, no values
  void build(ParamStore& ps);
  BlockCtx ctx(int B, int T, const RunOptions& o, int block, int step) const;  // step: 0-based loop step
  Node* run_blocks(Graph& g, const std::vector<std::unique_ptr<Block>>& blocks, int first_index, int step, Node* x,
                   int B, int T, const RunOptions& o) const;
  Config cfg_;
  ParamStore ps_;
  std::vector<std::unique_ptr<Block>> prelude_, core_, coda_;
  std::unique_ptr<LoopRule> rule_;
  std::unique_ptr<Norm> norm_f_;
  int tok_emb_ = -1, pos_emb_ = -1, lm_head_w_ = -1, lm_head_b_ = -1, gate_w_ = -1, gate_b_ = -1;
  Node *E_ = nullptr, *P_ = nullptr, *blm_ = nullptr, *gate_W_ = nullptr, *gate_B_ = nullptr;
  WeightMatrix* Wlm_ = nullptr;
  std::unique_ptr<RopeTable> rope_;
};

}  // namespace looplm
