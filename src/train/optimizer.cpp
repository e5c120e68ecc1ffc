#include "train/optimizer.h"

#include <cmath>

namespace looplm {

AdamW::AdamW(const ParamStore& ps) : m(ps.total(), 0.0f), v(ps.total(), 0.0f), decay_(ps.total(), 0) {
  for (auto& p : ps.infos())
    if (p.decay) std::fill(decay_.begin() + p.offset, decay_.begin() + p.offset + p.numel, 1);
}

void AdamW::step(ParamStore& ps, double lr, const Config& c) {
  ++t;
  const float b1 = (float)c.beta1, b2 = (float)c.beta2, eps = (float)c.adam_eps;
  const float bc1 = (float)(1.0 - std::pow(c.beta1, (double)t));
  const float sbc2 = (float)std::sqrt(1.0 - std::pow(c.beta2, (double)t));
  const float step_size = (float)lr / bc1;
  const float wd_keep = (float)(1.0 - lr * c.weight_decay);
  float* p = ps.values().data();
  const float* g = ps.grads().data();
  float* mm = m.data();
  float* vv = v.data();
  const uint8_t* dk = decay_.data();
  const int64_t n = (int64_t)ps.total();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float w = dk[i] ? p[i] * wd_keep : p[i];
    mm[i] = b1 * mm[i] + (1 - b1) * g[i];
    vv[i] = b2 * vv[i] + (1 - b2) * g[i] * g[i];
    p[i] = w - step_size * mm[i] / (std::sqrt(vv[i]) / sbc2 + eps);
  }
}

double lr_at(const Config& c, int step) {
  if (step < c.warmup) return c.lr * (step + 1) / c.warmup;
  const int span = c.steps - c.warmup;
  if (span <= 0) return c.lr;
  double progress = std::min(1.0, double(step - c.warmup) / span);
  double min_lr = c.lr * c.min_lr_ratio;
  return min_lr + 0.5 * (c.lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

double clip_grad_norm(ParamStore& ps, double max_norm) {
  float* g = ps.grads().data();
  const int64_t n = (int64_t)ps.total();
  double ss = 0;
#pragma omp parallel for reduction(+ : ss) schedule(static)
  for (int64_t i = 0; i < n; ++i) ss += (double)g[i] * g[i];
  double norm = std::sqrt(ss);
  if (max_norm > 0 && norm > max_norm) {
    float coef = (float)(max_norm / (norm + 1e-6));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) g[i] *= coef;
  }
  return norm;
}

}  // namespace looplm
