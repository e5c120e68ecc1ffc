// One optimizer step, as train() and the benchmark (Bench) run it.
#pragma once
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"
#include "ops/graph.h"
#include "train/distributed.h"
#include "train/optimizer.h"

namespace looplm {

struct StepOutcome {
  double loss = 0;       // mean cross-entropy over the micro-batches
  double grad_norm = 0;  // before clipping
  bool taken = false;    // false: the loss or the norm was not finite and the weights were left as they were
  size_t activation_bytes_peak = 0, grad_bytes_peak = 0;
  double sum_s = 0;  // seconds in GradientSum::finish: the exchange between ranks, if any
  // A model with an exit gate (the last micro-batch's): the gate's mean exit distribution over
  // exits 1..depth and its mean exit step; empty / NaN without a gate.
  std::vector<double> exit_distribution;
  double exit_mean_step = std::nan("");
};

// One micro-batch's loss, the node train_step back-propagates: the mean cross-entropy at the
// run's depth, or with an exit gate its objective (train/exit_objective.h: stage I, or stage II
// when c.train_only = exit_gate). `out` (optional) receives the gate's exit measurements.
Node* micro_batch_loss(Graph& g, const Model& m, const Config& c, const int32_t* x, const int32_t* y, const RunOptions& ro,
                       StepOutcome* out = nullptr);

// precision = bf16 needs a CPU that multiplies bf16 natively (AVX512_BF16): throws UsageError
// naming the feature where it has none. train() and Bench call it before they start.
void require_precision_supported(const Config& c);

// Gradients of the mean cross-entropy over c.grad_accum micro-batches (`next_batch` fills x and y,
// B x T each; `ro.micro` is set per micro-batch, which keys its random terms), clipped to
// c.grad_clip, then AdamW at `lr`; the layers' products run in c.precision. Divergence is caught
// before the optimizer step, so the weights (and every checkpoint) stay the last finite ones; the
// caller reports it.
// Each micro-batch's gradient is computed alone and summed in GradientSum's pairwise order; `sum`
// (kept across steps, so its buffers are reused) takes this rank's block of the micro-batches and
// sums over the ranks; without one, one process computes them all.
StepOutcome train_step(Model& m, AdamW& adam, Graph& g, const Config& c, RunOptions ro, double lr,
                       const std::function<void(int32_t* x, int32_t* y)>& next_batch, std::vector<int32_t>& x,
                       std::vector<int32_t>& y, GradientSum* sum = nullptr);

}  // namespace looplm
