#include "train/train_step.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/gemm.h"
#include "looplm/error.h"
#include "ops/ops.h"

namespace looplm {

void require_precision_supported(const Config& c) {
  if (c.precision == "bf16" && !bf16_products_supported())
    throw UsageError("precision = bf16 needs a CPU with AVX512_BF16 (bf16 dot products); this CPU has none: "
                     "train with precision = fp32");
}

StepOutcome train_step(Model& m, AdamW& adam, Graph& g, const Config& c, RunOptions ro, double lr,
                       const std::function<void(int32_t* x, int32_t* y)>& next_batch, std::vector<int32_t>& x,
                       std::vector<int32_t>& y) {
  StepOutcome out;
  const int B = c.batch_size, T = c.context;
  ro.training = true;
  g.set_bf16_products(c.precision == "bf16");
  m.params().zero_grad();
  for (int micro = 0; micro < c.grad_accum; ++micro) {
    ro.micro = micro;
    next_batch(x.data(), y.data());
    Node* l = op::cross_entropy(g, m.logits(g, x.data(), B, T, ro), y.data());
    out.loss += l->v[0] / c.grad_accum;
    g.backward(l, 1.0f / c.grad_accum);
    out.activation_bytes_peak = std::max(out.activation_bytes_peak, g.activation_bytes_peak());
    out.grad_bytes_peak = std::max(out.grad_bytes_peak, g.grad_bytes_peak());
    g.reset();
  }
  out.grad_norm = clip_grad_norm(m.params(), c.grad_clip);
  if (!std::isfinite(out.loss) || !std::isfinite(out.grad_norm)) return out;
  adam.step(m.params(), lr, c);
  out.taken = true;
  return out;
}

}  // namespace looplm
