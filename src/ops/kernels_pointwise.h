// Pointwise and row-wise kernels of the op set (activations, residual adds, concat, softmax-CE),
// forward and backward side by side, templated on the scalar (float engine / double gradcheck).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/kernels.h"

namespace looplm::k {

// ---------------------------------------------------------------- GELU, exact erf form (docs/systems.md)
template <class T>
inline T gelu(T x) { return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440))); }
template <class T>
inline T gelu_grad(T x) {  // Φ(x) + x φ(x)
  T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
  return cdf + x * std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
}
template <class T>
void gelu_fwd(const T* x, T* y, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) { y[i] = gelu(x[i]); });
}
template <class T>
void gelu_bwd(const T* x, const T* dy, T* dx, bool acc, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) { store(dx + i, dy[i] * gelu_grad(x[i]), acc); });
}

// ---------------------------------------------------------------- SwiGLU: y = silu(gate) ⊙ up
// u [N, 2f] = [gate | up] (one GEMM computes both), y [N, f]
template <class T>
inline T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <class T>
void swiglu_fwd(const T* u, T* y, int N, int f) {
  parallel_for<int>(N, (int64_t)N * f > kParallelMin, [&](int n) {
    const T* g = u + (int64_t)n * 2 * f;
    const T* up = g + f;
    T* yn = y + (int64_t)n * f;
    for (int i = 0; i < f; ++i) yn[i] = g[i] * sigmoid(g[i]) * up[i];
  });
}
// d gate = dy ⊙ up ⊙ silu'(gate), silu'(g) = σ(g)(1 + g(1 − σ(g)));  d up = dy ⊙ silu(gate)
template <class T>
void swiglu_bwd(const T* u, const T* dy, T* du, bool acc, int N, int f) {
  parallel_for<int>(N, (int64_t)N * f > kParallelMin, [&](int n) {
    const T* g = u + (int64_t)n * 2 * f;
    const T* up = g + f;
    const T* gy = dy + (int64_t)n * f;
    T* dg = du + (int64_t)n * 2 * f;
    T* dup = dg + f;
    for (int i = 0; i < f; ++i) {
      T s = sigmoid(g[i]);
      store(dg + i, gy[i] * up[i] * s * (T(1) + g[i] * (T(1) - s)), acc);
      store(dup + i, gy[i] * g[i] * s, acc);
    }
  });
}

// ---------------------------------------------------------------- residual: y = α a + b
template <class T>
void axpby_fwd(T alpha, const T* a, const T* b, T* y, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) { y[i] = alpha * a[i] + b[i]; });
}
// da = α dy, db = dy
template <class T>
void axpby_bwd(T alpha, const T* dy, T* da, bool acc_a, T* db, bool acc_b, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) {
    if (da) store(da + i, alpha * dy[i], acc_a);
    if (db) store(db + i, dy[i], acc_b);
  });
}

// ---------------------------------------------------------------- concat along columns
// a [N, ca], b [N, cb] -> y [N, ca + cb]; backward splits.
template <class T>
void concat_fwd(const T* a, int ca, const T* b, int cb, T* y, int N) {
  parallel_for<int>(N, (int64_t)N * (ca + cb) > kParallelMin, [&](int n) {
    T* yn = y + (int64_t)n * (ca + cb);
    for (int i = 0; i < ca; ++i) yn[i] = a[(int64_t)n * ca + i];
    for (int i = 0; i < cb; ++i) yn[ca + i] = b[(int64_t)n * cb + i];
  });
}
template <class T>
void concat_bwd(const T* dy, T* da, bool acc_a, int ca, T* db, bool acc_b, int cb, int N) {
  parallel_for<int>(N, (int64_t)N * (ca + cb) > kParallelMin, [&](int n) {
    const T* g = dy + (int64_t)n * (ca + cb);
    if (da)
      for (int i = 0; i < ca; ++i) store(da + (int64_t)n * ca + i, g[i], acc_a);
    if (db)
      for (int i = 0; i < cb; ++i) store(db + (int64_t)n * cb + i, g[ca + i], acc_b);
  });
}

// ---------------------------------------------------------------- columns c0..c0+n of x
// x [N, C] -> y [N, n]; backward puts dy into those columns of dx and (overwrite) zero elsewhere.
template <class T>
void slice_cols_fwd(const T* x, int C, int c0, int n, T* y, int N) {
  parallel_for<int>(N, (int64_t)N * n > kParallelMin, [&](int r) {
    for (int i = 0; i < n; ++i) y[(int64_t)r * n + i] = x[(int64_t)r * C + c0 + i];
  });
}
template <class T>
void slice_cols_bwd(const T* dy, T* dx, bool acc, int C, int c0, int n, int N) {
  parallel_for<int>(N, (int64_t)N * C > kParallelMin, [&](int r) {
    T* d = dx + (int64_t)r * C;
    if (!acc)
      for (int i = 0; i < C; ++i) d[i] = T(0);
    for (int i = 0; i < n; ++i) d[c0 + i] += dy[(int64_t)r * n + i];
  });
}

// ---------------------------------------------------------------- fused softmax + cross-entropy
// log Σ_v exp(z_v), from the row's maximum (no overflow).
template <class T>
inline T row_logsumexp(const T* z, int V) {
  T m = z[0];
  for (int v = 1; v < V; ++v) m = std::max(m, z[v]);
  T s = 0;
  for (int v = 0; v < V; ++v) s += std::exp(z[v] - m);
  return m + std::log(s);
}

// logits [N, V], targets [N]; returns the mean loss; lse [N] saved. Targets < 0 are ignored
// (not counted in the mean).
template <class T>
double xent_fwd(const T* logits, const int32_t* targets, T* lse, int N, int V, int* counted) {
  // Per-row losses in fixed chunks, added in order (independent of the thread count).
  const int nch = row_chunks(N);
  std::vector<double> part(nch, 0.0);
  std::vector<int> part_cnt(nch, 0);
  parallel_for<int>(nch, (int64_t)N * V > kParallelMin, [&](int ch) {
    for (int n = ch * kRowChunk; n < std::min(N, (ch + 1) * kRowChunk); ++n) {
      const T* z = logits + (int64_t)n * V;
      lse[n] = row_logsumexp(z, V);
      if (targets[n] >= 0) {
        part[ch] += double(lse[n] - z[targets[n]]);
        ++part_cnt[ch];
      }
    }
  });
  double total = 0;
  int cnt = 0;
  for (int ch = 0; ch < nch; ++ch) { total += part[ch]; cnt += part_cnt[ch]; }
  if (counted) *counted = cnt;
  return cnt ? total / cnt : 0.0;
}
// dlogits = (softmax − onehot) · dloss / count
template <class T>
void xent_bwd(const T* logits, const int32_t* targets, const T* lse, T dloss_over_count, T* dlogits, bool acc,
              int N, int V) {
  parallel_for<int>(N, (int64_t)N * V > kParallelMin, [&](int n) {
    const T* z = logits + (int64_t)n * V;
    T* g = dlogits + (int64_t)n * V;
    T w = targets[n] >= 0 ? dloss_over_count : T(0);
    for (int v = 0; v < V; ++v) {
      T p = std::exp(z[v] - lse[n]) * w;
      if (v == targets[n]) p -= w;
      store(g + v, p, acc);
    }
  });
}

}  // namespace looplm::k
