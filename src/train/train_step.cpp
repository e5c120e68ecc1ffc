#include "train/train_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "backend/cpu/gemm.h"
#include "looplm/error.h"
#include "ops/ops.h"
#include "train/exit_objective.h"

namespace looplm {

void require_precision_supported(const Config& c) {
  if (c.precision == "bf16" && !bf16_products_supported())
    throw UsageError("precision = bf16 needs a CPU with AVX512_BF16 (bf16 dot products); this CPU has none: "
                     "train with precision = fp32");
}

Node* micro_batch_loss(Graph& g, const Model& m, const Config& c, const int32_t* x, const int32_t* y, const RunOptions& ro,
                       StepOutcome* out) {
  if (!m.has_exit_gate()) return op::cross_entropy(g, m.logits(g, x, c.batch_size, c.context, ro), y);
  ExitMeasure measured;
  Node* l = c.train_only == "exit_gate" ? exit_gate_alone_loss(g, m, c, x, y, ro, &measured)
                                        : exit_objective_loss(g, m, c, x, y, ro, &measured);
  if (out) {
    out->exit_distribution = measured.distribution;
    out->exit_mean_step = measured.summary.mean_step;
  }
  return l;
}

StepOutcome train_step(Model& m, AdamW& adam, Graph& g, const Config& c, RunOptions ro, double lr,
                       const std::function<void(int32_t* x, int32_t* y)>& next_batch, std::vector<int32_t>& x,
                       std::vector<int32_t>& y, GradientSum* sum) {
  StepOutcome out;
  ro.training = true;
  g.set_bf16_products(c.precision == "bf16");
  std::optional<GradientSum> one_process;
  if (!sum) sum = &one_process.emplace(world_of_one(), c.grad_accum);
  std::span<float> grads = m.params().grads();
  sum->begin(grads);
  for (int j = 0; j < sum->count(); ++j) {
    ro.micro = (int)sum->first_micro() + j;
    // A looped weight's gradient gathers several terms per micro-batch: each micro-batch's starts
    // from zero, so the sum over micro-batches has one order whatever the ranks (GradientSum).
    m.params().zero_grad();
    next_batch(x.data(), y.data());
    Node* l = micro_batch_loss(g, m, c, x.data(), y.data(), ro, &out);
    const double loss = l->v[0] / c.grad_accum;
    g.backward(l, 1.0f / c.grad_accum);
    out.activation_bytes_peak = std::max(out.activation_bytes_peak, g.activation_bytes_peak());
    out.grad_bytes_peak = std::max(out.grad_bytes_peak, g.grad_bytes_peak());
    g.reset();
    sum->add(loss);
  }
  const auto t0 = std::chrono::steady_clock::now();
  out.loss = sum->finish();
  out.sum_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.grad_norm = clip_grad_norm(m.params(), c.grad_clip);
  if (!std::isfinite(out.loss) || !std::isfinite(out.grad_norm)) return out;
  adam.step(m.params(), lr, c);
  out.taken = true;
  return out;
}

}  // namespace looplm
