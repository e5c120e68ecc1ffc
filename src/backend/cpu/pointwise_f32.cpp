#include "backend/cpu/pointwise_f32.h"

#include <omp.h>

#include <algorithm>

#include "backend/cpu/fastmath.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/parallel.h"

namespace looplm::k {

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f, kInvSqrt2Pi = 0.39894228040143267794f;

LOOPLM_ISA_CLONES void gelu_fwd_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + fm::erf(x[i] * kInvSqrt2));
}

// GELU'(x) = Φ(x) + x φ(x)
inline float gelu_grad(float v) {
  return 0.5f * (1.0f + fm::erf(v * kInvSqrt2)) + v * fm::exp(-0.5f * v * v) * kInvSqrt2Pi;
}
// Two loops rather than a conditional read of dx, which would stop the vectoriser.
LOOPLM_ISA_CLONES void gelu_bwd_span(const float* x, const float* dy, float* dx, bool acc, int64_t n) {
  if (acc)
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * gelu_grad(x[i]);
  else
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_grad(x[i]);
}

}  // namespace

void gelu_fwd(const float* x, float* y, int64_t n) {
  parallel_spans(n, [&](int64_t lo, int64_t m) { gelu_fwd_span(x + lo, y + lo, m); });
}

void gelu_bwd(const float* x, const float* dy, float* dx, bool acc, int64_t n) {
  parallel_spans(n, [&](int64_t lo, int64_t m) { gelu_bwd_span(x + lo, dy + lo, dx + lo, acc, m); });
}

}  // namespace looplm::k
