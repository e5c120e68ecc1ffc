#include "backend/cpu/pointwise_f32.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/fastmath.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/parallel.h"

namespace looplm::k {

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f, kInvSqrt2Pi = 0.39894228040143267794f;

// Φ(x) from e = exp(−x²/2). Abramowitz & Stegun 7.1.26 (|error in erf| ≤ 1.5e-7):
// erf(z) = 1 − q(t) e^{−z²}, t = 1/(1 + p z), z = |x|/√2 — and e^{−z²} is exactly e, the same
// exponential that φ(x) = e/√(2π) needs, so GELU's backward Φ(x) + x φ(x) costs one exp.
// Φ = 1 − q e/2 for x ≥ 0 and q e/2 for x < 0 (no cancellation on the negative side).
inline float phi_cdf(float x, float e) {
  const float t = 1.0f / (1.0f + 0.3275911f * kInvSqrt2 * std::fabs(x));
  const float q = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float half_tail = 0.5f * q * e;
  return x < 0 ? half_tail : 1.0f - half_tail;
}

LOOPLM_ISA_CLONES void gelu_fwd_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * phi_cdf(x[i], fm::exp(-0.5f * x[i] * x[i]));
}

// GELU'(x) = Φ(x) + x φ(x)
inline float gelu_grad(float v) {
  const float e = fm::exp(-0.5f * v * v);
  return phi_cdf(v, e) + v * e * kInvSqrt2Pi;
}
// Two loops rather than a conditional read of dx, which would stop the vectoriser.
LOOPLM_ISA_CLONES void gelu_bwd_span(const float* x, const float* dy, float* dx, bool acc, int64_t n) {
  if (acc)
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * gelu_grad(x[i]);
  else
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu_grad(x[i]);
}

// σ(g) through fm::exp: libm's expf is a scalar call per element, and batch-1 decoding of a
// SwiGLU model spent ~8% of its time on it.
inline float sigmoid(float g) { return 1.0f / (1.0f + fm::exp(-g)); }
LOOPLM_ISA_CLONES void swiglu_fwd_row(const float* g, const float* up, float* y, int f) {
  for (int i = 0; i < f; ++i) y[i] = g[i] * sigmoid(g[i]) * up[i];
}
// silu'(g) = σ(g)(1 + g(1 − σ(g))); two loops rather than a conditional read of du (as GELU's).
LOOPLM_ISA_CLONES void swiglu_bwd_row(const float* g, const float* up, const float* dy, float* dg, float* dup, bool acc,
                                      int f) {
  if (acc)
    for (int i = 0; i < f; ++i) {
      const float s = sigmoid(g[i]);
      dg[i] += dy[i] * up[i] * s * (1.0f + g[i] * (1.0f - s));
      dup[i] += dy[i] * g[i] * s;
    }
  else
    for (int i = 0; i < f; ++i) {
      const float s = sigmoid(g[i]);
      dg[i] = dy[i] * up[i] * s * (1.0f + g[i] * (1.0f - s));
      dup[i] = dy[i] * g[i] * s;
    }
}

inline float sum16(const float* a) {
  float s = 0;
  for (int l = 0; l < 16; ++l) s += a[l];
  return s;
}

}  // namespace

void gelu_fwd(const float* x, float* y, int64_t n) {
  parallel_spans(n, [&](int64_t lo, int64_t m) { gelu_fwd_span(x + lo, y + lo, m); });
}

void gelu_bwd(const float* x, const float* dy, float* dx, bool acc, int64_t n) {
  parallel_spans(n, [&](int64_t lo, int64_t m) { gelu_bwd_span(x + lo, dy + lo, dx + lo, acc, m); });
}

void swiglu_fwd(const float* u, float* y, int N, int f) {
  parallel_for<int>(N, (int64_t)N * f > (1 << 14), [&](int n) {
    const float* g = u + (int64_t)n * 2 * f;
    swiglu_fwd_row(g, g + f, y + (int64_t)n * f, f);
  });
}

void swiglu_bwd(const float* u, const float* dy, float* du, bool acc, int N, int f) {
  parallel_for<int>(N, (int64_t)N * f > (1 << 14), [&](int n) {
    const float* g = u + (int64_t)n * 2 * f;
    float* dg = du + (int64_t)n * 2 * f;
    swiglu_bwd_row(g, g + f, dy + (int64_t)n * f, dg, dg + f, acc, f);
  });
}

LOOPLM_ISA_CLONES float softmax_row(float* s, int n) {
  float mx16[16];
  std::fill(mx16, mx16 + 16, s[0]);
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) mx16[l] = mx16[l] < s[j + l] ? s[j + l] : mx16[l];
  float mx = mx16[0];
  for (int l = 1; l < 16; ++l) mx = mx < mx16[l] ? mx16[l] : mx;
  for (; j < n; ++j) mx = mx < s[j] ? s[j] : mx;
  float acc[16] = {0};
  j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += (s[j + l] = fm::exp(s[j + l] - mx));
  float sum = sum16(acc);
  for (; j < n; ++j) sum += (s[j] = fm::exp(s[j] - mx));
  const float inv = 1.0f / sum;
  for (j = 0; j < n; ++j) s[j] *= inv;
  return mx + std::log(sum);
}

LOOPLM_ISA_CLONES void softmax_bwd_row(float* p, float* g, int n, float lse) {
  float acc[16] = {0};
  int j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) acc[l] += (p[j + l] = fm::exp(p[j + l] - lse)) * g[j + l];
  float dot = sum16(acc);
  for (; j < n; ++j) dot += (p[j] = fm::exp(p[j] - lse)) * g[j];
  for (j = 0; j < n; ++j) g[j] = p[j] * (g[j] - dot);
}

LOOPLM_ISA_CLONES void layernorm_row_fwd(const float* x, const float* w, const float* b, float* y, int d,
                                         double eps, float& mean, float& rstd) {
  float acc[16] = {0};
  int i = 0;
  for (; i + 16 <= d; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l];
  float mu = sum16(acc);
  for (; i < d; ++i) mu += x[i];
  mu /= (float)d;
  std::fill(acc, acc + 16, 0.0f);
  for (i = 0; i + 16 <= d; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += (x[i + l] - mu) * (x[i + l] - mu);
  float var = sum16(acc);
  for (; i < d; ++i) var += (x[i] - mu) * (x[i] - mu);
  const float r = 1.0f / std::sqrt(var / (float)d + (float)eps);
  mean = mu;
  rstd = r;
  if (w && b)
    for (i = 0; i < d; ++i) y[i] = (x[i] - mu) * r * w[i] + b[i];
  else
    for (i = 0; i < d; ++i) y[i] = (x[i] - mu) * r * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

LOOPLM_ISA_CLONES void layernorm_row_bwd(const float* x, const float* w, float mu, float r, const float* dy,
                                         float* dx, bool acc, float* pw, float* pb, int d) {
  float sg16[16] = {0}, sgx16[16] = {0};
  int i = 0;
  for (; i + 16 <= d; i += 16)
    for (int l = 0; l < 16; ++l) {
      const float xh = (x[i + l] - mu) * r, gy = dy[i + l], g = w ? gy * w[i + l] : gy;
      sg16[l] += g;
      sgx16[l] += g * xh;
      pw[i + l] += gy * xh;
      pb[i + l] += gy;
    }
  float sg = sum16(sg16), sgx = sum16(sgx16);
  for (; i < d; ++i) {
    const float xh = (x[i] - mu) * r, gy = dy[i], g = w ? gy * w[i] : gy;
    sg += g;
    sgx += g * xh;
    pw[i] += gy * xh;
    pb[i] += gy;
  }
  sg /= (float)d;
  sgx /= (float)d;
  if (!dx) return;
  if (acc)
    for (i = 0; i < d; ++i) {
      const float xh = (x[i] - mu) * r, g = w ? dy[i] * w[i] : dy[i];
      dx[i] += r * (g - sg - xh * sgx);
    }
  else
    for (i = 0; i < d; ++i) {
      const float xh = (x[i] - mu) * r, g = w ? dy[i] * w[i] : dy[i];
      dx[i] = r * (g - sg - xh * sgx);
    }
}

LOOPLM_ISA_CLONES static void weighted_rows_sum(const float* p, const float* V, int ld, int n, int hd, float* out);

void attend_cached_row(const float* q, const float* K, const float* V, int ld, int n, int hd, float scale, float* s,
                       float* out) {
  dot_rows(n, hd, K, ld, q, s);  // s = K q: sixteen keys per pass
  for (int j = 0; j < n; ++j) s[j] *= scale;
  softmax_row(s, n);
  weighted_rows_sum(s, V, ld, n, hd, out);
}

// out[hd] = Σ_j p[j] V[j, :], 64 columns at a time so the partial sums stay in registers.
LOOPLM_ISA_CLONES static void weighted_rows_sum(const float* p, const float* V, int ld, int n, int hd, float* out) {
  int i0 = 0;
  for (; i0 + 64 <= hd; i0 += 64) {
    float acc[64] = {0};
    for (int j = 0; j < n; ++j) {
      const float* vj = V + (int64_t)j * ld + i0;
      const float pj = p[j];
      for (int l = 0; l < 64; ++l) acc[l] += pj * vj[l];
    }
    for (int l = 0; l < 64; ++l) out[i0 + l] = acc[l];
  }
  for (; i0 < hd; i0 += 16) {
    const int w = std::min(16, hd - i0);
    float acc[16] = {0};
    for (int j = 0; j < n; ++j) {
      const float* vj = V + (int64_t)j * ld + i0;
      const float pj = p[j];
      for (int l = 0; l < w; ++l) acc[l] += pj * vj[l];
    }
    for (int l = 0; l < w; ++l) out[i0 + l] = acc[l];
  }
}

LOOPLM_ISA_CLONES void axpy_row(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
LOOPLM_ISA_CLONES void scale_row(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = a * x[i];
}

}  // namespace looplm::k
