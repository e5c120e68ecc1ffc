// Kernels of the energy blocks' ops (NRGPT and CEM in docs/systems.md), forward and backward side
// by side, templated on the scalar (float engine / double gradcheck, tests/test_energy_ops.cpp):
//   the GELU derivatives an analytic energy gradient needs (training differentiates them once
//   more, so GELU″ appears), a product with an untransposed weight (x W: the transposed use of a
//   tied matrix), a row scale (P = c·diag(γ)), and the head-block repeat / sum that let NRGPT's
//   attention energy reuse the attention op with every head's query equal to the token state.
// Reductions over rows run in fixed chunks or per column (kernels.h, kRowChunk), so results do
// not depend on the thread count.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/kernels.h"

namespace looplm::k {

// GELU(u) = u Φ(u) (exact erf form), GELU′(u) = Φ(u) + u φ(u), GELU″(u) = φ(u) (2 − u²).
template <class T>
struct GeluDerivs {
  T f, f1, f2;
};
template <class T>
inline GeluDerivs<T> gelu_derivs(T u) {
  const T cdf = T(0.5) * (T(1) + std::erf(u * T(0.70710678118654752440)));
  const T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * u * u);
  return {u * cdf, cdf + u * pdf, pdf * (T(2) - u * u)};
}

// y = GELU′(u) ⊙ v
template <class T>
void gelu_prime_mul_fwd(const T* u, const T* v, T* y, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) { y[i] = gelu_derivs(u[i]).f1 * v[i]; });
}
// du = GELU″(u) ⊙ v ⊙ dy;  dv = GELU′(u) ⊙ dy
template <class T>
void gelu_prime_mul_bwd(const T* u, const T* v, const T* dy, T* du, bool au, T* dv, bool av, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) {
    const GeluDerivs<T> d = gelu_derivs(u[i]);
    if (du) store(du + i, d.f2 * v[i] * dy[i], au);
    if (dv) store(dv + i, d.f1 * dy[i], av);
  });
}

// y = GELU(u) ⊙ GELU′(u)  (½ ∂‖GELU(u)‖²/∂u)
template <class T>
void gelu_gelu_prime_fwd(const T* u, T* y, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) {
    const GeluDerivs<T> d = gelu_derivs(u[i]);
    y[i] = d.f * d.f1;
  });
}
// du = (GELU′² + GELU GELU″) ⊙ dy
template <class T>
void gelu_gelu_prime_bwd(const T* u, const T* dy, T* du, bool acc, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) {
    const GeluDerivs<T> d = gelu_derivs(u[i]);
    store(du + i, (d.f1 * d.f1 + d.f * d.f2) * dy[i], acc);
  });
}

// ---------------------------------------------------------------- y = α x W (W [K, M] used untransposed)
// x [N, K], y [N, M]: the transposed use of a stored [out, in] matrix (energy gradients: W^T v).
template <class T>
void matmul_fwd(const T* x, const T* W, T* y, int N, int K, int M, T alpha = T(1), bool bf16 = false) {
  layer_product(bf16, false, false, N, M, K, alpha, x, K, W, M, T(0), y, M);
}
// dx = α dy W^T (overwrite or add);  dW += α x^T dy
template <class T>
void matmul_bwd(const T* x, const T* W, const T* dy, T* dx, bool dx_acc, T* dW, int N, int K, int M, T alpha = T(1),
                bool bf16 = false) {
  if (dx) layer_product(bf16, false, true, N, K, M, alpha, dy, M, W, M, dx_acc ? T(1) : T(0), dx, K);
  if (dW) layer_product(bf16, true, false, K, M, N, alpha, x, K, dy, M, T(1), dW, M);
}

// ---------------------------------------------------------------- y = c · x ⊙ w (w one row)
template <class T>
void mul_row_fwd(const T* x, const T* w, T c, T* y, int N, int C) {
  parallel_for<int>(N, (int64_t)N * C > kParallelMin, [&](int n) {
    for (int j = 0; j < C; ++j) y[(int64_t)n * C + j] = c * x[(int64_t)n * C + j] * w[j];
  });
}
// dx = c w ⊙ dy;  dw[j] += c Σ_n x[n, j] dy[n, j] (per column, rows in order)
template <class T>
void mul_row_bwd(const T* x, const T* w, T c, const T* dy, T* dx, bool acc, T* dw, int N, int C) {
  if (dx) {
    parallel_for<int>(N, (int64_t)N * C > kParallelMin, [&](int n) {
      for (int j = 0; j < C; ++j) store(dx + (int64_t)n * C + j, c * w[j] * dy[(int64_t)n * C + j], acc);
    });
  }
  if (dw) {
    parallel_for<int>(C, (int64_t)N * C > kParallelMin, [&](int j) {
      T s = 0;
      for (int n = 0; n < N; ++n) s += x[(int64_t)n * C + j] * dy[(int64_t)n * C + j];
      dw[j] += c * s;
    });
  }
}

// ---------------------------------------------------------------- head blocks
// repeat: y [N, n·d] = [x | x | ... | x];  its backward is sum_blocks, and the other way round.
template <class T>
void repeat_cols_fwd(const T* x, T* y, int N, int d, int n) {
  parallel_for<int>(N, (int64_t)N * d * n > kParallelMin, [&](int r) {
    for (int s = 0; s < n; ++s) std::copy(x + (int64_t)r * d, x + (int64_t)r * d + d, y + ((int64_t)r * n + s) * d);
  });
}
// y [N, d] = Σ_s x_s  (x [N, n·d]), or added to y
template <class T>
void sum_blocks_fwd(const T* x, T* y, bool acc, int N, int d, int n) {
  parallel_for<int>(N, (int64_t)N * d * n > kParallelMin, [&](int r) {
    T* o = y + (int64_t)r * d;
    const T* in = x + (int64_t)r * n * d;
    for (int j = 0; j < d; ++j) {
      T s = acc ? o[j] : T(0);
      for (int b = 0; b < n; ++b) s += in[(int64_t)b * d + j];
      o[j] = s;
    }
  });
}
// dx_s = dy for every block (overwrite or add)
template <class T>
void repeat_cols_acc(const T* dy, T* dx, bool acc, int N, int d, int n) {
  parallel_for<int>(N, (int64_t)N * d * n > kParallelMin, [&](int r) {
    for (int s = 0; s < n; ++s) {
      T* o = dx + ((int64_t)r * n + s) * d;
      const T* in = dy + (int64_t)r * d;
      for (int j = 0; j < d; ++j) store(o + j, in[j], acc);
    }
  });
}

// ---------------------------------------------------------------- per-head layouts (CEM)
// head_concat: Y [N, H·(a+b)], head k = [A_k | B] (A [N, H·a] per head, B [N, b] shared by heads)
template <class T>
void head_concat_fwd(const T* A, const T* B, T* Y, int N, int H, int a, int b) {
  const int w = a + b;
  parallel_for<int>(N, (int64_t)N * H * w > kParallelMin, [&](int r) {
    for (int k = 0; k < H; ++k) {
      T* y = Y + ((int64_t)r * H + k) * w;
      std::copy(A + ((int64_t)r * H + k) * a, A + ((int64_t)r * H + k) * a + a, y);
      std::copy(B + (int64_t)r * b, B + (int64_t)r * b + b, y + a);
    }
  });
}
// dA_k = dY_k[0, a);  dB = Σ_k dY_k[a, a+b)  (overwrite or add)
template <class T>
void head_concat_bwd(const T* dY, T* dA, bool aa, T* dB, bool ab, int N, int H, int a, int b) {
  const int w = a + b;
  parallel_for<int>(N, (int64_t)N * H * w > kParallelMin, [&](int r) {
    for (int k = 0; k < H; ++k) {
      const T* g = dY + ((int64_t)r * H + k) * w;
      if (dA)
        for (int j = 0; j < a; ++j) store(dA + ((int64_t)r * H + k) * a + j, g[j], aa);
    }
    if (dB)
      for (int j = 0; j < b; ++j) {
        T s = 0;
        for (int k = 0; k < H; ++k) s += dY[((int64_t)r * H + k) * w + a + j];
        store(dB + (int64_t)r * b + j, s, ab);
      }
  });
}
// head_slice: Z [N, H·n], head k = Y_k[c0, c0+n) (Y [N, H·w])
template <class T>
void head_slice_fwd(const T* Y, T* Z, int N, int H, int w, int c0, int n) {
  parallel_for<int>(N, (int64_t)N * H * n > kParallelMin, [&](int r) {
    for (int k = 0; k < H; ++k)
      std::copy(Y + ((int64_t)r * H + k) * w + c0, Y + ((int64_t)r * H + k) * w + c0 + n, Z + ((int64_t)r * H + k) * n);
  });
}
// dY_k[c0, c0+n) = dZ_k (added when acc; without acc the rest of dY is zeroed)
template <class T>
void head_slice_bwd(const T* dZ, T* dY, bool acc, int N, int H, int w, int c0, int n) {
  parallel_for<int>(N, (int64_t)N * H * w > kParallelMin, [&](int r) {
    for (int k = 0; k < H; ++k) {
      T* o = dY + ((int64_t)r * H + k) * w;
      if (!acc) std::fill(o, o + w, T(0));
      for (int j = 0; j < n; ++j) o[c0 + j] += dZ[((int64_t)r * H + k) * n + j];
    }
  });
}

// ---------------------------------------------------------------- elementwise
template <class T>
void mul_fwd(const T* a, const T* b, T* y, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) { y[i] = a[i] * b[i]; });
}
template <class T>
void mul_bwd(const T* a, const T* b, const T* dy, T* da, bool aa, T* db, bool ab, int64_t n) {
  parallel_for<int64_t>(n, n > kParallelMin, [&](int64_t i) {
    if (da) store(da + i, b[i] * dy[i], aa);
    if (db) store(db + i, a[i] * dy[i], ab);
  });
}
// softplus(x) = log(1 + eˣ) (stable), its derivative σ(x)
template <class T>
void softplus_fwd(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::max(x[i], T(0)) + std::log1p(std::exp(-std::fabs(x[i])));
}
template <class T>
void softplus_bwd(const T* x, const T* dy, T* dx, bool acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store(dx + i, dy[i] / (T(1) + std::exp(-x[i])), acc);
}

}  // namespace looplm::k
