// Training a learned exit gate (docs/systems.md, Learned exit gate; config exit_gate):
//   stage I  (the whole model)  L = Σ_r p(r) L_r − β H over every exit r = 1..depth, p the gate's
//                               exit distribution, H the token or batch prior's entropy;
//   stage II (train_only = exit_gate: the gate alone on the frozen model) the BCE of the continue
//            probability 1 − λ_r against w_r = σ(k (max(0, L_{r−1} − L_r) − γ)), r = 1..depth, with
//            L_0 the loss of exit 0 (the prelude's output read by the head).
// micro_batch_loss (train_step.h) calls these for a model with a gate.
#pragma once
#include <vector>

#include "model/model.h"
#include "ops/kernels_exit.h"

namespace looplm {

struct ExitMeasure {
  k::ExitSummary summary;            // token means of Σ p L, H(p), Σ r p
  std::vector<double> distribution;  // the mean p(r), r = 1..depth
};

// Stage I. Under truncated back-propagation (RunOptions::grad_steps) the exit of a step without
// gradients reads its state detached: no gradient reaches the loop through it, while its coda,
// head and gate learn from it as from every exit. Each exit's loss is the fused head and
// cross-entropy (Model::head_loss): its logits are made a chunk of rows at a time and recomputed
// in backward, so memory does not grow with depth × tokens × vocabulary.
Node* exit_objective_loss(Graph& g, const Model& m, const Config& c, const int32_t* x, const int32_t* y,
                          const RunOptions& ro, ExitMeasure* measured);
// Stage II. The trunk and every head run without gradients; only each exit's final hidden state
// [B·T, d] is kept, for the gate's product.
Node* exit_gate_alone_loss(Graph& g, const Model& m, const Config& c, const int32_t* x, const int32_t* y,
                           const RunOptions& ro, ExitMeasure* measured);

}  // namespace looplm
