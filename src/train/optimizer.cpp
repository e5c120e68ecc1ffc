#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/parallel.h"
#include "looplm/error.h"

namespace looplm {

AdamW::AdamW(const ParamStore& ps) : m(ps.total(), 0.0f), v(ps.total(), 0.0f), decay_(ps.total(), 0) {
  for (auto& p : ps.infos())
    if (p.decay) std::fill(decay_.begin() + p.offset, decay_.begin() + p.offset + p.numel, 1);
  spans_ = {{0, (int64_t)ps.total()}};
}

void AdamW::train_only(const ParamStore& ps, const std::string& prefix) {
  spans_.clear();
  for (auto& p : ps.infos())
    if (p.name.rfind(prefix, 0) == 0) spans_.push_back({(int64_t)p.offset, (int64_t)p.numel});
  if (spans_.empty()) throw UsageError("config key 'train_only': the model has no parameters " + prefix + "*");
}

namespace {

struct AdamCoef { float b1, b2, eps, step_size, wd_keep, inv_sbc2; };

// One span of the update (ISA-cloned: runs 16 lanes wide on AVX-512).
LOOPLM_ISA_CLONES void adamw_span(float* p, const float* g, float* m, float* v, const uint8_t* decay, int64_t n,
                                  AdamCoef c) {
  for (int64_t i = 0; i < n; ++i) {
    const float w = decay[i] ? p[i] * c.wd_keep : p[i];
    m[i] = c.b1 * m[i] + (1 - c.b1) * g[i];
    v[i] = c.b2 * v[i] + (1 - c.b2) * g[i] * g[i];
    p[i] = w - c.step_size * m[i] / (std::sqrt(v[i]) * c.inv_sbc2 + c.eps);  // one divide per element
  }
}

}  // namespace

void AdamW::step(ParamStore& ps, double lr, const Config& c) {
  ++t;
  AdamCoef k;
  k.b1 = (float)c.beta1;
  k.b2 = (float)c.beta2;
  k.eps = (float)c.adam_eps;
  k.step_size = (float)(lr / (1.0 - std::pow(c.beta1, (double)t)));
  k.inv_sbc2 = (float)(1.0 / std::sqrt(1.0 - std::pow(c.beta2, (double)t)));
  k.wd_keep = (float)(1.0 - lr * c.weight_decay);
  float* p = ps.values().data();
  const float* g = ps.grads().data();
  for (const auto& span : spans_) {
    const int64_t first = span.first;  // a plain variable: clang 14 cannot capture a structured binding
    parallel_spans(span.second, [&, first](int64_t lo, int64_t n) {
      lo += first;
      adamw_span(p + lo, g + lo, m.data() + lo, v.data() + lo, decay_.data() + lo, n, k);
    });
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
  // Fixed chunks added in order: the norm (and so the clipping) does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t nch = (n + kChunk - 1) / kChunk;
  std::vector<double> part(nch, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < nch; ++ch) {
    double s = 0;
    for (int64_t i = ch * kChunk; i < std::min(n, (ch + 1) * kChunk); ++i) s += (double)g[i] * g[i];
    part[ch] = s;
  }
  double ss = 0;
  for (double p : part) ss += p;
  double norm = std::sqrt(ss);
  if (max_norm > 0 && norm > max_norm) {
    float coef = (float)(max_norm / (norm + 1e-6));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) g[i] *= coef;
  }
  return norm;
}

}  // namespace looplm
