// A loop rule: how the loop state moves around the shared core (docs/systems.md). The rule owns its
// state: init_state makes it from the prelude output, step advances it by one application of the
// core, readout gives the exit's hidden state [N, d]. The state may be anything a rule needs —
// one stream [N, d] (residual, gated) or n streams [N, n·d] (hyper) — so eval, generation and the
// diagnostics only ever look at readout(state).
//
// A rule is one source file: a class, and a register_*() function that src/model/components.cpp
// calls with its name, summary and config keys (docs/architecture.md; loop_residual.cpp is the
// worked example).
#pragma once
#include <functional>
#include <memory>

#include "core/rng.h"
#include "ops/cache_ref.h"
#include "looplm/config.h"
#include "model/params.h"

namespace looplm {

using CoreFn = std::function<Node*(Graph&, Node* x)>;  // one application of all core blocks

// What a loop step may depend on besides its inputs. Random terms (training noise) are drawn from
// rng(): keyed by (seed, step, micro-batch, loop step, purpose), so gradient accumulation never
// repeats a draw and a resumed run redraws exactly. Data-parallel ranks take blocks of one step's
// micro-batches (`micro` counts over all ranks), so N ranks draw what one process would: no rank in
// the key, or N-rank training would stop being bit-identical to one.
struct LoopCtx {
  bool training = false;  // noise and other training-only terms
  uint64_t seed = 0, step = 0;
  int micro = 0;          // micro-batch within the step (gradient accumulation)
  // Where init_state's rows sit: row n is token n % T of batch row n / T, at position
  // place.at(n / T) + n % T (a forward pass: 0..T-1; generation: each row's own position).
  int T = 1;
  op::RowPlace place;
  int position(int64_t n) const { return place.at((int)(n / T)) + (int)(n % T); }
  Rng rng(uint64_t purpose, int r) const {
    return Rng(seed, kStreamNoise,
               splitmix64(step) ^ splitmix64((uint64_t)micro << 32) ^
                   splitmix64(((uint64_t)(uint32_t)r << 32) ^ purpose ^ 0x5bd1e995ULL));
  }
};

class LoopRule {
 public:
  virtual ~LoopRule() = default;
  virtual void bind(ParamStore&) {}
  // The state before step 1 from the prelude output h_pre [N, d]. Default: h_pre itself.
  virtual Node* init_state(Graph& g, Node* h_pre, const LoopCtx& ctx) const { return h_pre; }
  // The state after loop step r (r = 1..depth, also beyond the trained R) from the one before.
  virtual Node* step(Graph& g, Node* state, Node* h_pre, int r, const CoreFn& core, const LoopCtx& ctx) const = 0;
  // The exit's hidden state h^(r) [N, d] (-> coda -> norm_f -> lm_head). Default: the state itself.
  virtual Node* readout(Graph& g, Node* state) const { return state; }
  // Forward FLOPs per token of one step besides the core's (the rule's own maps; counted like
  // Block::flops_per_token). Default: none.
  virtual double flops_per_token() const { return 0; }
};

using LoopRuleFactory = std::function<std::unique_ptr<LoopRule>(ParamStore&, const Config&)>;

}  // namespace looplm
